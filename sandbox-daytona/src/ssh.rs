//! SSH access: tokens minted with `POST /sandbox/{id}/ssh-access` (PROTOCOL.md §5).
//!
//! Minting a token revokes every earlier token of that sandbox, so tokens are kept in one cache
//! for the whole process, keyed by API URL and sandbox id, and shared by every caller: a token
//! is reused while it stays valid for the time asked for, and renewed (minted again) before it
//! expires. Concurrent callers wait for one mint instead of revoking each other's tokens.

use crate::error::PROVIDER;
use crate::provider::Inner;
use crate::time::parse_rfc3339;
use crate::wire::SshAccessDto;
use sandbox_sdk_core::http::Method;
use sandbox_sdk_core::{Error, ErrorKind, Result, SshAccess};
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};
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
            .is_some_and(|at| at > SystemTime::now() + ttl)
    {
        return Ok(kept.clone());
    }
    let minted = mint(inner, sandbox_id, ttl).await?;
    tokens.insert(key, minted.clone());
    Ok(minted)
}

/// Drops the cached token of a sandbox (after a destroy, or a token the gateway refused).
pub(crate) async fn forget(inner: &Inner, sandbox_id: &str) {
    let key = (inner.config.api_url.clone(), sandbox_id.to_owned());
    cache().lock().await.remove(&key);
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
    let (host, port) = dto
        .ssh_command
        .as_deref()
        .and_then(parse_ssh_command)
        .unwrap_or_else(|| (DEFAULT_SSH_HOST.to_owned(), 22));
    let expires_at = dto
        .expires_at
        .as_deref()
        .and_then(parse_rfc3339)
        .unwrap_or_else(|| SystemTime::now() + Duration::from_secs(minutes * 60));
    Ok(SshAccess {
        host,
        port,
        user: dto.token.clone(),
        token: Some(dto.token),
        expires_at: Some(expires_at),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
