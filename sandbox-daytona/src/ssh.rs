//! SSH access: tokens minted with `POST /sandbox/{id}/ssh-access` (PROTOCOL.md §5).
//!
//! Minting a token revokes every earlier token of that sandbox, so tokens are kept in one cache
//! for the whole process, keyed by API URL and sandbox id, and shared by every caller: a token
//! is reused while it stays valid for the time asked for, and renewed (minted again) before it
//! expires. Concurrent callers wait for one mint instead of revoking each other's tokens.

use crate::error::PROVIDER;
use crate::provider::Inner;
use crate::wire::SshAccessDto;
use bytes::Bytes;
use futures::StreamExt;
use russh::ChannelMsg;
use sandbox_sdk_core::http::Method;
use sandbox_sdk_core::shell::{quote_argv, shell_quote, shell_script};
use sandbox_sdk_core::time::parse_rfc3339;
use sandbox_sdk_core::{
    Command, Error, ErrorKind, ExitStatus, Process, ProcessControl, ProcessEvent, PtySize, Result,
    SshAccess, Stdin,
};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::Mutex;

/// The cloud SSH gateway, used when the API's `sshCommand` names no host.
pub const DEFAULT_SSH_HOST: &str = "ssh.app.daytona.io";

/// The shortest validity a token is minted for.
const MIN_TTL: Duration = Duration::from_secs(60);

type Cache = Mutex<HashMap<(String, String), SshAccess>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Host and port from an `sshCommand` such as `ssh -p 2222 TOKEN@host` or `ssh TOKEN@host`.
pub(crate) fn parse_ssh_command(command: &str) -> Option<(String, u16)> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let mut port = 22u16;
    let mut host = None;
    let mut i = 0;
    while i < words.len() {
        match words[i] {
            "-p" => {
                port = words.get(i + 1)?.parse().ok()?;
                i += 1;
            }
            word if word.contains('@') => {
                host = word.rsplit_once('@').map(|(_, h)| h.to_owned());
            }
            _ => {}
        }
        i += 1;
    }
    host.filter(|h| !h.is_empty()).map(|h| (h, port))
}

/// The cached access for `sandbox_id` if it stays valid for `ttl`, else a freshly minted one
/// (which then replaces the cached one).
pub(crate) async fn access(inner: &Inner, sandbox_id: &str, ttl: Duration) -> Result<SshAccess> {
    let key = (inner.config.api_url.clone(), sandbox_id.to_owned());
    let mut tokens = cache().lock().await;
    if let Some(kept) = tokens.get(&key)
        && kept
            .expires_at
            .zip(crate::time::system_time_after(ttl))
            .is_some_and(|(at, needed)| at > needed)
    {
        return Ok(kept.clone());
    }
    let minted = mint(inner, sandbox_id, ttl).await?;
    tokens.insert(key, minted.clone());
    Ok(minted)
}

/// Drops the cached token of a sandbox (after a destroy).
pub(crate) async fn forget(inner: &Inner, sandbox_id: &str) {
    let key = (inner.config.api_url.clone(), sandbox_id.to_owned());
    cache().lock().await.remove(&key);
}

/// Drops the cached token of a sandbox only if it is still `token`, the one the gateway refused.
/// Another caller may have renewed it meanwhile; dropping the renewed one would make the next
/// caller mint again and so revoke a token that is in use.
pub(crate) async fn forget_refused(inner: &Inner, sandbox_id: &str, token: &str) {
    let key = (inner.config.api_url.clone(), sandbox_id.to_owned());
    let mut tokens = cache().lock().await;
    if tokens
        .get(&key)
        .is_some_and(|kept| kept.token.as_deref() == Some(token))
    {
        tokens.remove(&key);
    }
}

async fn mint(inner: &Inner, sandbox_id: &str, ttl: Duration) -> Result<SshAccess> {
    let ttl = ttl.max(MIN_TTL);
    // Ask for a little more than needed so the token is still good at the end of `ttl`.
    let minutes = ttl.as_secs().div_ceil(60) + 1;
    let dto: SshAccessDto = inner
        .http
        .request(
            Method::Post,
            &format!("{}/ssh-access", Inner::sandbox_path(sandbox_id)),
        )
        .query("expiresInMinutes", minutes)
        .operation("ssh_access")
        .sandbox_id(sandbox_id)
        .send_json()
        .await?;
    if dto.token.is_empty() {
        return Err(
            Error::new(ErrorKind::Provider, "the API returned an empty SSH token").or_context(
                PROVIDER,
                "ssh_access",
                Some(sandbox_id),
            ),
        );
    }
    let named = || {
        dto.ssh_command
            .as_deref()
            .and_then(parse_ssh_command)
            .unwrap_or_else(|| (DEFAULT_SSH_HOST.to_owned(), 22))
    };
    let (host, port) = inner.config.ssh_gateway.clone().unwrap_or_else(named);
    let expires_at = dto
        .expires_at
        .as_deref()
        .and_then(parse_rfc3339)
        .or_else(|| {
            crate::time::system_time_after(Duration::from_secs(minutes.saturating_mul(60)))
        });
    Ok(SshAccess {
        host,
        port,
        user: dto.token.clone(),
        token: Some(dto.token),
        expires_at,
    })
}

// ---- exec over SSH (russh) ----

/// Prefix of the ids of processes run over SSH (they are not toolbox sessions).
pub(crate) const PID_PREFIX: &str = "ssh/";

/// How long a token used by [`exec`] must stay valid.
const EXEC_TOKEN_TTL: Duration = Duration::from_secs(30 * 60);

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

/// How the gateway's host key is verified (from the builder).
#[derive(Clone)]
enum HostKeyPolicy {
    /// Only the key with this fingerprint is accepted.
    Pinned(russh::keys::ssh_key::Fingerprint),
    /// No pin, and the caller opted into trust on first use.
    TrustFirstUse,
    /// No pin and no opt-in: every key is refused.
    Refuse,
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

struct GatewayClient {
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

/// The command line run over SSH: the argv quoted, cwd and env folded into `sh -c`, and a
/// process timeout through coreutils `timeout`. SSH keeps bytes exact, so no end mark.
pub(crate) fn ssh_command_line(command: &Command) -> Result<String> {
    command.validate()?;
    let line = if command.cwd.is_none() && command.env.is_empty() {
        quote_argv(&command.argv)?
    } else {
        format!("sh -c {}", shell_quote(&shell_script(command)?)?)
    };
    if command.timeout.is_zero() {
        return Ok(line);
    }
    let secs = command.timeout.as_millis().div_ceil(1000).max(1);
    Ok(format!("timeout -k 5 {secs} {line}"))
}

fn ssh_error(kind: ErrorKind, message: impl Into<String>, sandbox_id: &str) -> Error {
    Error::new(kind, message).or_context(PROVIDER, "ssh_exec", Some(sandbox_id))
}

/// After the gateway dropped the connection: a sandbox that is not `started` is `NotRunning`,
/// otherwise the token was refused (invalid, expired or revoked) and is forgotten.
async fn explain_disconnect(inner: &Inner, sandbox_id: &str, token: &str) -> Error {
    match inner.fetch(sandbox_id, "ssh_exec").await {
        Ok(dto) if dto.state.as_deref() != Some("started") => ssh_error(
            ErrorKind::NotRunning,
            format!(
                "the SSH gateway closed the connection: the sandbox is {}",
                dto.state.as_deref().unwrap_or("in an unknown state")
            ),
            sandbox_id,
        ),
        Err(e) if e.kind() == ErrorKind::NotFound => ssh_error(
            ErrorKind::NotRunning,
            "the SSH gateway closed the connection: the sandbox is gone",
            sandbox_id,
        ),
        Err(e) => e,
        Ok(_) => {
            forget_refused(inner, sandbox_id, token).await;
            ssh_error(
                ErrorKind::Unauthorized,
                "the SSH gateway closed the connection: the access token is invalid, expired or revoked",
                sandbox_id,
            )
        }
    }
}

/// Runs `command` over an SSH session channel through the gateway: auth method `none` with the
/// cached token as user, then `exec`; stdout (`Data`), stderr (`ExtendedData` 1) and the exit
/// status arrive apart. Stdin, a pty and window resizes are supported. The gateway's host key
/// is verified first ([`HostKeyPolicy`]): the token only goes to a pinned key, or to the key
/// trusted on first use when the caller opted into that, and otherwise the call fails
/// `Unauthorized` without sending it.
pub(crate) async fn exec(
    inner: Arc<Inner>,
    sandbox_id: &str,
    command: &Command,
) -> Result<Process> {
    let line = ssh_command_line(command)?;
    let access = access(&inner, sandbox_id, EXEC_TOKEN_TTL).await?;
    let token = access.token.clone().unwrap_or_else(|| access.user.clone());
    let endpoint = format!("{}:{}", access.host, access.port);
    let config = russh::client::Config {
        keepalive_interval: Some(Duration::from_secs(30)),
        keepalive_max: 4,
        nodelay: true,
        ..Default::default()
    };
    let policy = match inner.config.ssh_host_key.as_deref() {
        // A malformed pin fails `build`; should one get here, it pins no key.
        Some(pin) => match parse_fingerprint(pin) {
            Some(pin) => HostKeyPolicy::Pinned(pin),
            None => HostKeyPolicy::Refuse,
        },
        None if inner.config.ssh_trust_first_use => HostKeyPolicy::TrustFirstUse,
        None => HostKeyPolicy::Refuse,
    };
    let refusal = Arc::new(std::sync::Mutex::new(None));
    let client = GatewayClient {
        endpoint: endpoint.clone(),
        policy,
        refusal: refusal.clone(),
    };
    let connect = russh::client::connect(
        Arc::new(config),
        (access.host.as_str(), access.port),
        client,
    );
    let mut handle = match tokio::time::timeout(inner.config.request_timeout, connect).await {
        Err(_) => {
            return Err(ssh_error(
                ErrorKind::Timeout,
                format!("connecting to the SSH gateway {endpoint} timed out"),
                sandbox_id,
            ));
        }
        Ok(Err(e)) => {
            if let Some(refused) = refusal.lock().unwrap_or_else(|e| e.into_inner()).take() {
                return Err(refusal_error(refused, &endpoint, sandbox_id));
            }
            return Err(ssh_error(
                ErrorKind::Transport,
                format!("could not connect to the SSH gateway {endpoint}: {e}"),
                sandbox_id,
            ));
        }
        Ok(Ok(handle)) => handle,
    };
    let auth = handle.authenticate_none(token.as_str()).await;
    match auth {
        Ok(result) if result.success() => {}
        Ok(_) => {
            forget_refused(&inner, sandbox_id, &token).await;
            return Err(ssh_error(
                ErrorKind::Unauthorized,
                "the SSH gateway refused the access token",
                sandbox_id,
            ));
        }
        Err(_) => return Err(explain_disconnect(&inner, sandbox_id, &token).await),
    }
    let channel = match handle.channel_open_session().await {
        Ok(channel) => channel,
        Err(_) => return Err(explain_disconnect(&inner, sandbox_id, &token).await),
    };
    if let Some(size) = command.pty {
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
            .map_err(|e| {
                ssh_error(
                    ErrorKind::Transport,
                    format!("pty request failed: {e}"),
                    sandbox_id,
                )
            })?;
    }
    channel.exec(true, line.into_bytes()).await.map_err(|e| {
        ssh_error(
            ErrorKind::Transport,
            format!("exec request failed: {e}"),
            sandbox_id,
        )
    })?;
    let (read, write) = channel.split();
    let write = Arc::new(write);
    let stdin = if command.stdin {
        let (stdin, mut rx) = Stdin::channel(16);
        let writer = write.clone();
        tokio::spawn(async move {
            while let Some(chunk) = rx.recv().await {
                if writer.data(&chunk[..]).await.is_err() {
                    return;
                }
            }
            writer.eof().await.ok();
        });
        Some(stdin)
    } else {
        None
    };
    let killed = Arc::new(tokio::sync::Notify::new());
    let control = Arc::new(SshControl {
        write: write.clone(),
        killed: killed.clone(),
    });
    let state = SshEvents {
        read,
        handle,
        inner,
        sandbox_id: sandbox_id.to_owned(),
        token,
        status: None,
        done: false,
        killed,
    };
    let events = futures::stream::unfold(state, |mut s| async move {
        s.next().await.map(|event| (event, s))
    })
    .boxed();
    let pid = format!("{PID_PREFIX}{}", uuid::Uuid::new_v4().simple());
    register(&pid, &control);
    Ok(Process::new(pid, events, stdin, control))
}

type Registry = std::sync::Mutex<HashMap<String, std::sync::Weak<SshControl>>>;

/// The SSH processes of this process whose handles are still alive, by pid, so that
/// `kill_process(pid)` reaches them (an SSH channel has no id the gateway could look up).
fn registry() -> &'static Registry {
    static LIVE: OnceLock<Registry> = OnceLock::new();
    LIVE.get_or_init(Default::default)
}

fn register(pid: &str, control: &Arc<SshControl>) {
    let mut live = registry().lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|_, weak| weak.strong_count() > 0);
    live.insert(pid.to_owned(), Arc::downgrade(control));
}

/// Kills the SSH process `pid` started by this process (its channel gets `KILL` and is
/// closed); `NotFound` when no live handle has that pid.
pub(crate) async fn kill(pid: &str, sandbox_id: &str) -> Result<()> {
    let control = registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(pid)
        .and_then(std::sync::Weak::upgrade);
    match control {
        Some(control) => control
            .kill()
            .await
            .map_err(|e| e.or_context(PROVIDER, "kill_process", Some(sandbox_id))),
        None => Err(Error::new(
            ErrorKind::NotFound,
            format!("no SSH process {pid} is running from this process"),
        )
        .or_context(PROVIDER, "kill_process", Some(sandbox_id))),
    }
}

struct SshEvents {
    read: russh::ChannelReadHalf,
    /// Kept so the connection lives as long as the process handle.
    #[allow(dead_code)]
    handle: russh::client::Handle<GatewayClient>,
    inner: Arc<Inner>,
    sandbox_id: String,
    /// The token this connection used (only to forget it if the gateway refuses it).
    token: String,
    status: Option<ExitStatus>,
    done: bool,
    /// Signalled by [`SshControl::kill`]: the process ends by SIGKILL without waiting for the
    /// gateway to report it.
    killed: Arc<tokio::sync::Notify>,
}

impl SshEvents {
    async fn next(&mut self) -> Option<Result<ProcessEvent>> {
        if self.done {
            return None;
        }
        loop {
            let message = tokio::select! {
                message = self.read.wait() => message,
                _ = self.killed.notified() => {
                    self.done = true;
                    return Some(Ok(ProcessEvent::Exit(ExitStatus::signal(9))));
                }
            };
            match message {
                Some(ChannelMsg::Data { data }) => {
                    return Some(Ok(ProcessEvent::Stdout(Bytes::copy_from_slice(&data))));
                }
                Some(ChannelMsg::ExtendedData { data, ext: 1 }) => {
                    return Some(Ok(ProcessEvent::Stderr(Bytes::copy_from_slice(&data))));
                }
                Some(ChannelMsg::ExitStatus { exit_status }) => {
                    self.status = Some(ExitStatus::code(exit_status as i32));
                }
                Some(ChannelMsg::ExitSignal { signal_name, .. }) => {
                    self.status = Some(ExitStatus::signal(signal_number(&signal_name)));
                }
                Some(ChannelMsg::Close) | None => {
                    self.done = true;
                    return Some(match self.status {
                        Some(status) => Ok(ProcessEvent::Exit(status)),
                        None => Err(
                            explain_disconnect(&self.inner, &self.sandbox_id, &self.token).await,
                        ),
                    });
                }
                Some(_) => {}
            }
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

struct SshControl {
    write: Arc<russh::ChannelWriteHalf<russh::client::Msg>>,
    killed: Arc<tokio::sync::Notify>,
}

#[async_trait::async_trait]
impl ProcessControl for SshControl {
    async fn kill(&self) -> Result<()> {
        // The gateway relays signals to the sandbox's sshd; closing the channel ends it too.
        self.killed.notify_one();
        self.write.signal(russh::Sig::KILL).await.ok();
        self.write.close().await.map_err(|e| {
            Error::new(
                ErrorKind::Transport,
                format!("closing the SSH channel failed: {e}"),
            )
        })
    }

    async fn resize(&self, size: PtySize) -> Result<()> {
        self.write
            .window_change(u32::from(size.cols), u32::from(size.rows), 0, 0)
            .await
            .map_err(|e| Error::new(ErrorKind::Transport, format!("window change failed: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cached(token: &str) -> SshAccess {
        SshAccess {
            host: "gw".into(),
            port: 22,
            user: token.into(),
            token: Some(token.into()),
            expires_at: Some(std::time::SystemTime::now() + Duration::from_secs(3600)),
        }
    }

    #[tokio::test]
    async fn a_refused_token_is_forgotten_only_while_it_is_still_the_cached_one() {
        let provider = crate::DaytonaBuilder::new()
            .api_key("k")
            .api_url("http://127.0.0.1:9/forget-refused-test")
            .build()
            .unwrap();
        let inner = &provider.inner;
        let key = (inner.config.api_url.clone(), "sb-forget".to_owned());
        cache().lock().await.insert(key.clone(), cached("renewed"));
        // A connection made with the old token fails after another caller renewed it.
        forget_refused(inner, "sb-forget", "old").await;
        let kept = cache().lock().await.get(&key).cloned();
        assert_eq!(kept.and_then(|a| a.token).as_deref(), Some("renewed"));
        forget_refused(inner, "sb-forget", "renewed").await;
        assert!(cache().lock().await.get(&key).is_none());
    }

    #[test]
    fn ssh_commands_parse() {
        assert_eq!(
            parse_ssh_command("ssh Fg8Jx2nPtWAVY5pVN0TlUcbCDNPFqePB@ssh.app.daytona.io"),
            Some(("ssh.app.daytona.io".to_owned(), 22))
        );
        assert_eq!(
            parse_ssh_command("ssh -p 2222 token@localhost"),
            Some(("localhost".to_owned(), 2222))
        );
        assert_eq!(parse_ssh_command("ssh -p x t@h"), None);
        assert_eq!(parse_ssh_command("ssh"), None);
    }

    #[test]
    fn ssh_command_lines_fold_cwd_env_and_timeout() {
        assert_eq!(
            ssh_command_line(&Command::shell("exit 3")).unwrap(),
            "'sh' '-c' 'exit 3'"
        );
        assert_eq!(
            ssh_command_line(
                &Command::new("sleep")
                    .arg("9")
                    .timeout(Duration::from_secs(2))
            )
            .unwrap(),
            "timeout -k 5 2 'sleep' '9'"
        );
        let line = ssh_command_line(&Command::new("pwd").cwd("/tmp").env("A", "b")).unwrap();
        assert!(line.starts_with("sh -c 'cd -- "), "{line}");
    }
}
