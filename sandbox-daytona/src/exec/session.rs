//! The sessions commands run in (PROTOCOL.md §6.2): [`Sessions`] names, makes, pools and deletes
//! them for one sandbox handle; [`SessionGuard`] gives a foreground command's session back or
//! deletes it; [`SessionControl`] kills a command by deleting its session.

use crate::api::toolbox::Toolbox;
use crate::config::PROVIDER;
use sandbox_sdk_core::{Error, ErrorKind, ProcessControl, PtySize, Result};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// The most idle sessions a sandbox keeps for its next commands; more are deleted.
const MAX_IDLE_SESSIONS: usize = 4;

/// How many taken session names [`Sessions::create_new`] steps over before giving up.
const MAX_NAME_TRIES: u32 = 64;

/// Prefix of the sessions of tagged commands.
pub(crate) const TAG_PREFIX: &str = "sdk-tag-";

/// Prefix of the pooled sessions of foreground commands.
pub(crate) const EXEC_PREFIX: &str = "sdk-exec-";

/// Per sandbox id, the foreground sessions whose command ended, ready for the next one. One
/// per provider, shared by every handle of its sandboxes. Idle sessions live until the sandbox
/// stops or is destroyed: at most [`MAX_IDLE_SESSIONS`] per sandbox.
#[derive(Debug, Default)]
pub(crate) struct SessionPool(Mutex<HashMap<String, Vec<String>>>);

impl SessionPool {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<String>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take(&self, sandbox_id: &str) -> Option<String> {
        self.lock().get_mut(sandbox_id).and_then(Vec::pop)
    }

    /// Keeps `sid`; `false` when the sandbox's pool is full.
    fn put(&self, sandbox_id: &str, sid: String) -> bool {
        let mut pools = self.lock();
        let idle = pools.entry(sandbox_id.to_owned()).or_default();
        if idle.len() >= MAX_IDLE_SESSIONS {
            return false;
        }
        idle.push(sid);
        true
    }

    /// Drops a destroyed sandbox's pool.
    pub(crate) fn forget(&self, sandbox_id: &str) {
        self.lock().remove(sandbox_id);
    }
}

/// The sessions of one sandbox handle.
pub(crate) struct Sessions {
    pub tb: Arc<Toolbox>,
    pool: Arc<SessionPool>,
    /// The number of the next session this handle names (`sdk-exec-N`, `sdk-bg-N`).
    next_session: AtomicU64,
    /// The number of the next command line this handle sends (its `sdk-cmd-N`).
    next_command: AtomicU64,
}

impl Sessions {
    /// The sessions of `tb`'s sandbox, pooling idle ones in `pool`.
    pub fn new(tb: Arc<Toolbox>, pool: Arc<SessionPool>) -> Self {
        Sessions {
            tb,
            pool,
            next_session: AtomicU64::new(1),
            next_command: AtomicU64::new(1),
        }
    }

    /// The label of the next command line.
    pub fn next_label(&self) -> u64 {
        self.next_command.fetch_add(1, Ordering::Relaxed)
    }

    /// Makes the session `sid`. A name still in use answers 409 (`Conflict`).
    pub async fn create(&self, sid: &str) -> Result<()> {
        self.tb.create_session(sid, "exec").await
    }

    /// Makes a session named `sdk-{kind}-N`. Names are numbered per handle (so replays are
    /// deterministic); a name another handle holds right now answers 409, and the next number
    /// is tried.
    pub async fn create_new(&self, kind: &str) -> Result<String> {
        let mut tries = 0;
        loop {
            let n = self.next_session.fetch_add(1, Ordering::Relaxed);
            let sid = format!("sdk-{kind}-{n}");
            match self.create(&sid).await {
                Ok(()) => return Ok(sid),
                Err(e) if e.kind() == ErrorKind::Conflict && tries < MAX_NAME_TRIES => tries += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// An idle pooled session of this sandbox (`true`: taken from the pool), or a new one.
    pub async fn acquire(&self) -> Result<(String, bool)> {
        match self.pool.take(&self.tb.sandbox_id) {
            Some(sid) => Ok((sid, true)),
            None => Ok((self.create_new("exec").await?, false)),
        }
    }

    /// Gives a session whose command ended back to the pool, or deletes it when the pool is
    /// full.
    pub fn release(self: &Arc<Self>, sid: String) {
        if !self.pool.put(&self.tb.sandbox_id, sid.clone()) {
            self.spawn_delete(sid);
        }
    }

    /// Deletes a session (the daemon kills its shell and what runs in it).
    pub async fn delete(&self, sid: &str) -> Result<()> {
        self.tb.delete_session(sid).await
    }

    /// Deletes a session in a detached task (from a `Drop`, or for a call its caller
    /// abandoned), when a runtime is there to do it. The request is bounded by the request
    /// timeout.
    pub fn spawn_delete(self: &Arc<Self>, sid: String) {
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let sessions = self.clone();
            handle.spawn(async move {
                sessions.delete(&sid).await.ok();
            });
        }
    }
}

/// The session a tagged command runs in: `sdk-tag-{tag}`. A tag still in use (its session not
/// deleted) makes the daemon answer 409, reported as `Conflict`.
pub(crate) fn tag_session(tag: &str) -> Result<String> {
    let valid = !tag.is_empty()
        && tag.len() <= 64
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !valid {
        return Err(Error::validation(format!(
            "tag {tag:?} must be 1-64 letters, digits, '-', '_' or '.'"
        ))
        .with_provider(PROVIDER));
    }
    Ok(format!("{TAG_PREFIX}{tag}"))
}

/// Splits a pid `{sessionId}/{commandId}`.
pub(crate) fn split_pid(pid: &str) -> Result<(&str, &str)> {
    match pid.split_once('/') {
        Some((s, c)) if !s.is_empty() && !c.is_empty() && !c.contains('/') => Ok((s, c)),
        _ => Err(Error::validation(format!(
            "{pid:?} is not a Daytona process id (expected SESSION/COMMAND)"
        ))
        .with_provider(PROVIDER)),
    }
}

/// Whether a command is running, was killed through its handle, or ended; only one of the
/// last two ever happens, so a kill never deletes a session already back in the pool.
#[derive(Debug, Default)]
pub(crate) struct CommandState(AtomicU8);

const RUNNING: u8 = 0;
const KILLED: u8 = 1;
const ENDED: u8 = 2;

impl CommandState {
    /// The state of a command that already ended.
    pub(crate) fn ended() -> Self {
        CommandState(AtomicU8::new(ENDED))
    }

    /// Marks the command killed; `false` when it had already ended.
    fn kill(&self) -> bool {
        self.0
            .compare_exchange(RUNNING, KILLED, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
            || self.killed()
    }

    /// Whether the command was killed through its handle.
    pub(crate) fn killed(&self) -> bool {
        self.0.load(Ordering::SeqCst) == KILLED
    }

    /// Marks the command ended; `false` when it was killed first.
    pub(crate) fn finish(&self) -> bool {
        self.0
            .compare_exchange(RUNNING, ENDED, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
            || self.0.load(Ordering::SeqCst) == ENDED
    }
}

/// Kills by deleting the command's session (the daemon kills the session's shell).
pub(crate) struct SessionControl {
    pub sessions: Arc<Sessions>,
    pub sid: String,
    pub state: Arc<CommandState>,
}

#[async_trait::async_trait]
impl ProcessControl for SessionControl {
    async fn kill(&self) -> Result<()> {
        if !self.state.kill() {
            // It ended; its session may already run another command.
            return Ok(());
        }
        self.sessions.delete(&self.sid).await
    }

    async fn resize(&self, _size: PtySize) -> Result<()> {
        Err(Error::not_supported(PROVIDER, "pty"))
    }
}

/// A command's session: when `armed` (a foreground command), deleted when its handle is
/// dropped before the end (which kills the command) and given back to the pool once the
/// command ended.
pub(crate) struct SessionGuard {
    pub sessions: Arc<Sessions>,
    pub sid: String,
    pub armed: bool,
}

impl SessionGuard {
    /// The command ended: its session serves the next command.
    pub(crate) fn release(&mut self) {
        if std::mem::take(&mut self.armed) {
            self.sessions.release(self.sid.clone());
        }
    }

    /// The session is gone (killed): nothing to do.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if self.armed {
            self.sessions.spawn_delete(std::mem::take(&mut self.sid));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_split_into_session_and_command() {
        assert_eq!(split_pid("s1/c1").unwrap(), ("s1", "c1"));
        for bad in ["", "s1", "/c", "s/", "a/b/c"] {
            assert!(split_pid(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tags_name_their_session() {
        assert_eq!(
            tag_session("conformance-bg").unwrap(),
            "sdk-tag-conformance-bg"
        );
        assert!(tag_session("a/b").is_err());
        assert!(tag_session("").is_err());
    }

    #[test]
    fn the_pool_keeps_at_most_four_idle_sessions_per_sandbox() {
        let pool = SessionPool::default();
        for i in 0..MAX_IDLE_SESSIONS {
            assert!(pool.put("sb", format!("s{i}")));
        }
        assert!(!pool.put("sb", "one-too-many".into()));
        assert!(pool.put("other", "s0".into()));
        assert_eq!(pool.take("sb").as_deref(), Some("s3"));
        pool.forget("sb");
        assert_eq!(pool.take("sb"), None);
    }
}
