//! SSH (PROTOCOL.md §10): access tokens minted with `POST /sandbox/{id}/ssh-access`, and
//! commands run over an SSH session channel through Daytona's gateway.
//!
//! Minting a token revokes every earlier token of that sandbox, so tokens are kept in one cache
//! for the whole process, keyed by API URL and sandbox id, and shared by every caller: a token
//! is reused while it stays valid for the time asked for, and renewed (minted again) before it
//! expires. Concurrent callers wait for one mint instead of revoking each other's tokens.

use crate::api::client::Api;
use crate::api::ssh::{OpenError, SshChannel, SshMessage, SshWriter, Target, open_exec, ssh_error};
use crate::config::{DEFAULT_SSH_HOST, PROVIDER, system_time_after};
use futures::StreamExt;
use sandbox_sdk_core::emulate::fold_env_cwd;
use sandbox_sdk_core::shell::quote_argv;
use sandbox_sdk_core::time::parse_rfc3339;
use sandbox_sdk_core::{
    Command, Error, ErrorKind, ExitStatus, Process, ProcessControl, ProcessEvent, PtySize, Result,
    SshAccess, Stdin,
};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::Mutex;

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
pub(crate) async fn access(api: &Api, sandbox_id: &str, ttl: Duration) -> Result<SshAccess> {
    let key = (api.config.api_url.clone(), sandbox_id.to_owned());
    let mut tokens = cache().lock().await;
    if let Some(kept) = tokens.get(&key)
        && kept
            .expires_at
            .zip(system_time_after(ttl))
            .is_some_and(|(at, needed)| at > needed)
    {
        return Ok(kept.clone());
    }
    let minted = mint(api, sandbox_id, ttl).await?;
    tokens.insert(key, minted.clone());
    Ok(minted)
}

/// Drops the cached token of a sandbox (after a destroy).
pub(crate) async fn forget(api: &Api, sandbox_id: &str) {
    let key = (api.config.api_url.clone(), sandbox_id.to_owned());
    cache().lock().await.remove(&key);
}

/// Drops the cached token of a sandbox only if it is still `token`, the one the gateway refused.
/// Another caller may have renewed it meanwhile; dropping the renewed one would make the next
/// caller mint again and so revoke a token that is in use.
pub(crate) async fn forget_refused(api: &Api, sandbox_id: &str, token: &str) {
    let key = (api.config.api_url.clone(), sandbox_id.to_owned());
    let mut tokens = cache().lock().await;
    if tokens
        .get(&key)
        .is_some_and(|kept| kept.token.as_deref() == Some(token))
    {
        tokens.remove(&key);
    }
}

async fn mint(api: &Api, sandbox_id: &str, ttl: Duration) -> Result<SshAccess> {
    let ttl = ttl.max(MIN_TTL);
    // Ask for a little more than needed so the token is still good at the end of `ttl`.
    let minutes = ttl.as_secs().div_ceil(60) + 1;
    let dto = api.mint_ssh_access(sandbox_id, minutes).await?;
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
    let (host, port) = api.config.ssh_gateway.clone().unwrap_or_else(named);
    let expires_at = dto
        .expires_at
        .as_deref()
        .and_then(parse_rfc3339)
        .or_else(|| system_time_after(Duration::from_secs(minutes.saturating_mul(60))));
    Ok(SshAccess {
        host,
        port,
        user: dto.token.clone(),
        token: Some(dto.token),
        expires_at,
    })
}

/// Prefix of the ids of processes run over SSH (they are not toolbox sessions).
pub(crate) const PID_PREFIX: &str = "ssh/";

/// How long a token used by [`exec`] must stay valid.
const EXEC_TOKEN_TTL: Duration = Duration::from_secs(30 * 60);

/// The command line run over SSH: the argv quoted (cwd and env folded into `sh -c` first by
/// core's one folding, [`fold_env_cwd`]), and a process timeout through coreutils `timeout`.
/// SSH keeps bytes exact, so no end mark.
pub(crate) fn ssh_command_line(command: &Command) -> Result<String> {
    command.validate()?;
    let line = quote_argv(&fold_env_cwd(command)?.argv)?;
    if command.timeout.is_zero() {
        return Ok(line);
    }
    let secs = command.timeout.as_millis().div_ceil(1000).max(1);
    Ok(format!("timeout -k 5 {secs} {line}"))
}

/// After the gateway dropped the connection: a sandbox that is not `started` is `NotRunning`,
/// otherwise the token was refused (invalid, expired or revoked) and is forgotten.
async fn explain_disconnect(api: &Api, sandbox_id: &str, token: &str) -> Error {
    match api.get_sandbox(sandbox_id, "ssh_exec").await {
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
            forget_refused(api, sandbox_id, token).await;
            ssh_error(
                ErrorKind::Unauthorized,
                "the SSH gateway closed the connection: the access token is invalid, expired or revoked",
                sandbox_id,
            )
        }
    }
}

/// Runs `command` over an SSH session channel through the gateway: auth method `none` with the
/// cached token as user, then `exec`; stdout, stderr and the exit status arrive apart. Stdin,
/// a pty and window resizes are supported. The gateway's host key is verified first: the token
/// only goes to a pinned key, or to the key trusted on first use when the caller opted into
/// that, and otherwise the call fails `Unauthorized` without sending it.
pub(crate) async fn exec(api: Arc<Api>, sandbox_id: &str, command: &Command) -> Result<Process> {
    let line = ssh_command_line(command)?;
    let access = access(&api, sandbox_id, EXEC_TOKEN_TTL).await?;
    let token = access.token.clone().unwrap_or_else(|| access.user.clone());
    let target = Target {
        host: &access.host,
        port: access.port,
        token: &token,
        sandbox_id,
    };
    let (channel, writer) = match open_exec(&api.config, target, command.pty, line).await {
        Ok(opened) => opened,
        Err(OpenError::Failed(e)) => return Err(e),
        Err(OpenError::Refused) => {
            forget_refused(&api, sandbox_id, &token).await;
            return Err(ssh_error(
                ErrorKind::Unauthorized,
                "the SSH gateway refused the access token",
                sandbox_id,
            ));
        }
        Err(OpenError::Dropped) => return Err(explain_disconnect(&api, sandbox_id, &token).await),
    };
    let stdin = if command.stdin {
        let (stdin, mut rx) = Stdin::channel(16);
        let writer = writer.clone();
        tokio::spawn(async move {
            while let Some(chunk) = rx.recv().await {
                if !writer.data(&chunk[..]).await {
                    return;
                }
            }
            writer.eof().await;
        });
        Some(stdin)
    } else {
        None
    };
    let killed = Arc::new(tokio::sync::Notify::new());
    let control = Arc::new(SshControl {
        writer,
        killed: killed.clone(),
    });
    let state = SshEvents {
        channel,
        api,
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
    channel: SshChannel,
    api: Arc<Api>,
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
                message = self.channel.next() => message,
                _ = self.killed.notified() => {
                    self.done = true;
                    return Some(Ok(ProcessEvent::Exit(ExitStatus::signal(9))));
                }
            };
            match message {
                SshMessage::Stdout(data) => return Some(Ok(ProcessEvent::Stdout(data))),
                SshMessage::Stderr(data) => return Some(Ok(ProcessEvent::Stderr(data))),
                SshMessage::ExitStatus(code) => self.status = Some(ExitStatus::code(code)),
                SshMessage::ExitSignal(signal) => self.status = Some(ExitStatus::signal(signal)),
                SshMessage::Closed => {
                    self.done = true;
                    return Some(match self.status {
                        Some(status) => Ok(ProcessEvent::Exit(status)),
                        None => {
                            Err(explain_disconnect(&self.api, &self.sandbox_id, &self.token).await)
                        }
                    });
                }
                SshMessage::Other => {}
            }
        }
    }
}

struct SshControl {
    writer: SshWriter,
    killed: Arc<tokio::sync::Notify>,
}

#[async_trait::async_trait]
impl ProcessControl for SshControl {
    async fn kill(&self) -> Result<()> {
        self.killed.notify_one();
        self.writer.kill().await
    }

    async fn resize(&self, size: PtySize) -> Result<()> {
        self.writer.resize(size).await
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
        let provider = crate::DaytonaProvider::builder()
            .api_key("k")
            .api_url("http://127.0.0.1:9/forget-refused-test")
            .build()
            .unwrap();
        let api = provider.api();
        let inner = &*api;
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
        assert!(line.starts_with("'sh' '-c' 'cd -- "), "{line}");
    }
}
