//! SSH through Daytona's gateway (russh, PROTOCOL.md §10): [`open_exec`] connects, verifies the
//! gateway's host key before the access token is sent, authenticates with method `none` (the
//! token as user), opens a session channel and starts a command; [`SshChannel`] reads what the
//! channel says and [`SshWriter`] writes to it.

use crate::config::{Config, PROVIDER};
use bytes::Bytes;
use russh::ChannelMsg;
use sandbox_sdk_core::{Error, ErrorKind, PtySize, Result};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// A host key pin (`SHA256:…` or `SHA512:…`, base64 without padding, as `ssh-keygen -l`
/// prints it), or `None` when `text` is not one.
pub(crate) fn parse_fingerprint(text: &str) -> Option<russh::keys::ssh_key::Fingerprint> {
    text.trim().parse().ok()
}

/// Host keys seen per gateway (`host:port` → SHA-256 fingerprint), trusted on first use for the
/// life of the process by providers that opted in; a different key later is refused.
fn known_hosts() -> &'static std::sync::Mutex<HashMap<String, String>> {
    static KNOWN: OnceLock<std::sync::Mutex<HashMap<String, String>>> = OnceLock::new();
    KNOWN.get_or_init(|| std::sync::Mutex::new(HashMap::new()))
}

/// How the gateway's host key is verified (from the settings).
#[derive(Clone)]
enum HostKeyPolicy {
    /// Only the key with this fingerprint is accepted.
    Pinned(russh::keys::ssh_key::Fingerprint),
    /// No pin, and the caller opted into trust on first use.
    TrustFirstUse,
    /// No pin and no opt-in: every key is refused.
    Refuse,
}

impl HostKeyPolicy {
    fn of(config: &Config) -> HostKeyPolicy {
        match config.ssh_host_key.as_deref() {
            // A malformed pin fails `build`; should one get here, it pins no key.
            Some(pin) => match parse_fingerprint(pin) {
                Some(pin) => HostKeyPolicy::Pinned(pin),
                None => HostKeyPolicy::Refuse,
            },
            None if config.ssh_trust_first_use => HostKeyPolicy::TrustFirstUse,
            None => HostKeyPolicy::Refuse,
        }
    }
}

/// Why a host key was refused, with the SHA-256 fingerprint of the key the gateway showed.
enum Refusal {
    /// It is not the pinned key.
    NotPinned(String),
    /// It differs from the key trusted on first use earlier in this process.
    Changed(String),
    /// Nothing to verify it against (no pin, no opt-in).
    Unverified(String),
}

/// The russh client handler: verifies the gateway's host key.
pub(crate) struct GatewayClient {
    endpoint: String,
    policy: HostKeyPolicy,
    refusal: Arc<std::sync::Mutex<Option<Refusal>>>,
}

impl russh::client::Handler for GatewayClient {
    type Error = russh::Error;

    /// Runs during the key exchange, before [`russh::client::connect`] returns and so before
    /// the access token is sent (as the user name of the `none` auth that follows): a key that
    /// is refused here ends the connection with nothing sent but the handshake.
    async fn check_server_key(
        &mut self,
        key: &russh::keys::PublicKeyOrCertificate,
    ) -> std::result::Result<bool, Self::Error> {
        // For a certificate, the key it certifies: the key exchange was signed with that key,
        // and the certificate's signer is not trusted for anything.
        let key = key.public_key();
        let seen = key.fingerprint(russh::keys::HashAlg::Sha256).to_string();
        let refusal = match &self.policy {
            HostKeyPolicy::Pinned(pin) => {
                (key.fingerprint(pin.algorithm()) != *pin).then_some(Refusal::NotPinned(seen))
            }
            HostKeyPolicy::TrustFirstUse => {
                let mut known = known_hosts().lock().unwrap_or_else(|e| e.into_inner());
                let trusted = known
                    .entry(self.endpoint.clone())
                    .or_insert_with(|| seen.clone());
                (*trusted != seen).then_some(Refusal::Changed(seen))
            }
            HostKeyPolicy::Refuse => Some(Refusal::Unverified(seen)),
        };
        let ok = refusal.is_none();
        *self.refusal.lock().unwrap_or_else(|e| e.into_inner()) = refusal;
        Ok(ok)
    }
}

/// The error for a refused host key.
fn refusal_error(refusal: Refusal, endpoint: &str, sandbox_id: &str) -> Error {
    let message = match refusal {
        Refusal::NotPinned(seen) => format!(
            "the SSH gateway {endpoint} presented host key {seen}, not the pinned one (ssh_host_key); the access token was not sent"
        ),
        Refusal::Changed(seen) => format!(
            "the SSH gateway {endpoint} presented host key {seen}, not the one it presented first in this process; the access token was not sent"
        ),
        Refusal::Unverified(seen) => format!(
            "the SSH gateway {endpoint} presented host key {seen}, which cannot be verified: pin the gateway's key with DaytonaBuilder::ssh_host_key (after checking it), or opt into trusting the first key seen with DaytonaBuilder::ssh_trust_host_key_on_first_use; the access token was not sent"
        ),
    };
    ssh_error(ErrorKind::Unauthorized, message, sandbox_id)
}

/// An error of an SSH exec.
pub(crate) fn ssh_error(kind: ErrorKind, message: impl Into<String>, sandbox_id: &str) -> Error {
    Error::new(kind, message).or_context(PROVIDER, "ssh_exec", Some(sandbox_id))
}

/// Why [`open_exec`] did not start the command.
pub(crate) enum OpenError {
    /// The gateway refused the token in the `none` auth.
    Refused,
    /// The gateway dropped the connection after the handshake (an invalid, expired or revoked
    /// token, or a sandbox that is not started: it says nothing about which).
    Dropped,
    /// Anything else, as an error to report.
    Failed(Error),
}

/// One gateway endpoint and the token to use there.
pub(crate) struct Target<'a> {
    pub host: &'a str,
    pub port: u16,
    pub token: &'a str,
    pub sandbox_id: &'a str,
}

/// Connects to the gateway, verifies its host key, authenticates with `none` and the token,
/// opens a session channel, asks for a pty of `pty`'s size when set, and runs `line`.
pub(crate) async fn open_exec(
    config: &Config,
    target: Target<'_>,
    pty: Option<PtySize>,
    line: String,
) -> std::result::Result<(SshChannel, SshWriter), OpenError> {
    let sandbox_id = target.sandbox_id;
    let endpoint = format!("{}:{}", target.host, target.port);
    let russh_config = russh::client::Config {
        keepalive_interval: Some(Duration::from_secs(30)),
        keepalive_max: 4,
        nodelay: true,
        ..Default::default()
    };
    let refusal = Arc::new(std::sync::Mutex::new(None));
    let client = GatewayClient {
        endpoint: endpoint.clone(),
        policy: HostKeyPolicy::of(config),
        refusal: refusal.clone(),
    };
    let connect =
        russh::client::connect(Arc::new(russh_config), (target.host, target.port), client);
    let failed = |kind, message: String| OpenError::Failed(ssh_error(kind, message, sandbox_id));
    let mut handle = match tokio::time::timeout(config.request_timeout, connect).await {
        Err(_) => {
            return Err(failed(
                ErrorKind::Timeout,
                format!("connecting to the SSH gateway {endpoint} timed out"),
            ));
        }
        Ok(Err(e)) => {
            if let Some(refused) = refusal.lock().unwrap_or_else(|e| e.into_inner()).take() {
                return Err(OpenError::Failed(refusal_error(
                    refused, &endpoint, sandbox_id,
                )));
            }
            return Err(failed(
                ErrorKind::Transport,
                format!("could not connect to the SSH gateway {endpoint}: {e}"),
            ));
        }
        Ok(Ok(handle)) => handle,
    };
    match handle.authenticate_none(target.token).await {
        Ok(result) if result.success() => {}
        Ok(_) => return Err(OpenError::Refused),
        Err(_) => return Err(OpenError::Dropped),
    }
    let channel = handle
        .channel_open_session()
        .await
        .map_err(|_| OpenError::Dropped)?;
    if let Some(size) = pty {
        channel
            .request_pty(
                true,
                "xterm-256color",
                u32::from(size.cols),
                u32::from(size.rows),
                0,
                0,
                &[],
            )
            .await
            .map_err(|e| failed(ErrorKind::Transport, format!("pty request failed: {e}")))?;
    }
    channel
        .exec(true, line.into_bytes())
        .await
        .map_err(|e| failed(ErrorKind::Transport, format!("exec request failed: {e}")))?;
    let (read, write) = channel.split();
    Ok((
        SshChannel { read, handle },
        SshWriter {
            write: Arc::new(write),
        },
    ))
}

/// What the channel said.
pub(crate) enum SshMessage {
    /// Stdout bytes (`Data`).
    Stdout(Bytes),
    /// Stderr bytes (`ExtendedData` 1).
    Stderr(Bytes),
    /// The command's exit status.
    ExitStatus(i32),
    /// The signal that ended the command.
    ExitSignal(i32),
    /// The channel closed (or the connection ended).
    Closed,
    /// Anything else.
    Other,
}

/// The reading side of a command's channel; keeps the connection alive while it lives.
pub(crate) struct SshChannel {
    read: russh::ChannelReadHalf,
    /// Kept so the connection lives as long as the channel.
    #[allow(dead_code)]
    handle: russh::client::Handle<GatewayClient>,
}

impl SshChannel {
    /// The next message of the channel.
    pub async fn next(&mut self) -> SshMessage {
        match self.read.wait().await {
            Some(ChannelMsg::Data { data }) => SshMessage::Stdout(Bytes::copy_from_slice(&data)),
            Some(ChannelMsg::ExtendedData { data, ext: 1 }) => {
                SshMessage::Stderr(Bytes::copy_from_slice(&data))
            }
            Some(ChannelMsg::ExitStatus { exit_status }) => {
                SshMessage::ExitStatus(exit_status as i32)
            }
            Some(ChannelMsg::ExitSignal { signal_name, .. }) => {
                SshMessage::ExitSignal(signal_number(&signal_name))
            }
            Some(ChannelMsg::Close) | None => SshMessage::Closed,
            Some(_) => SshMessage::Other,
        }
    }
}

fn signal_number(sig: &russh::Sig) -> i32 {
    use russh::Sig;
    match sig {
        Sig::HUP => 1,
        Sig::INT => 2,
        Sig::QUIT => 3,
        Sig::ILL => 4,
        Sig::ABRT => 6,
        Sig::FPE => 8,
        Sig::KILL => 9,
        Sig::USR1 => 10,
        Sig::SEGV => 11,
        Sig::PIPE => 13,
        Sig::ALRM => 14,
        Sig::TERM => 15,
        _ => 0,
    }
}

/// The writing side of a command's channel (cheap to clone).
#[derive(Clone)]
pub(crate) struct SshWriter {
    write: Arc<russh::ChannelWriteHalf<russh::client::Msg>>,
}

impl SshWriter {
    /// Sends stdin bytes; `false` once the channel no longer takes them.
    pub async fn data(&self, chunk: &[u8]) -> bool {
        self.write.data(chunk).await.is_ok()
    }

    /// Sends end of file on stdin.
    pub async fn eof(&self) {
        self.write.eof().await.ok();
    }

    /// Sends `KILL` (the gateway relays signals to the sandbox's sshd) and closes the channel,
    /// which ends the command too.
    pub async fn kill(&self) -> Result<()> {
        self.write.signal(russh::Sig::KILL).await.ok();
        self.write.close().await.map_err(|e| {
            Error::new(
                ErrorKind::Transport,
                format!("closing the SSH channel failed: {e}"),
            )
        })
    }

    /// Changes the pty's window size.
    pub async fn resize(&self, size: PtySize) -> Result<()> {
        self.write
            .window_change(u32::from(size.cols), u32::from(size.rows), 0, 0)
            .await
            .map_err(|e| Error::new(ErrorKind::Transport, format!("window change failed: {e}")))
    }
}
