//! Sandboxes and their sessions (PROTOCOL.md §4, §5, §8, §10): the [`Handle`] a sandbox keeps
//! (its name and the session it last saw), create ([`create`]), states ([`state`]), and the
//! lifecycle calls.
//!
//! Our sandbox id is the sandbox **name**; the session (`sbx_…`) that commands and files go to
//! is internal state, read from every answer that carries it. Decisions:
//!
//! - `connect` and `info` read the sandbox with `resume=false`: looking must not start a
//!   billable session. A stopped sandbox connects fine (state `Stopped`); commands and file
//!   calls on it fail with `NotRunning` until [`resume`] (`resume=true`, which starts a new
//!   session from the latest snapshot, §4.3).
//! - `stop` stops the current session and waits (checking at once, then backing off) until it
//!   is `stopped`, `failed` or `aborted` (§5.1).
//! - `set_timeout(t)` makes the running session last until now + `t`: `extend-timeout` only
//!   adds (§5.1), so the adapter reads the session and adds what is missing past
//!   `startedAt + timeout`, "now" being the server's clock (the answer's `Date` header; this
//!   machine's clock when there is none); a session that already lasts longer is left as it
//!   is (Vercel cannot shorten one).

pub(crate) mod create;
pub(crate) mod state;

use crate::api::Api;
use crate::config::{PREVIEW_DOMAIN, PROVIDER};
use crate::wire::{NamedSandbox, Route, SandboxEnvelope, Session, Snapshot};
use futures::StreamExt;
use sandbox_sdk_core::http::checked_preview_url;
use sandbox_sdk_core::paging::pages;
use sandbox_sdk_core::wait::Backoff;
use sandbox_sdk_core::{
    Error, ErrorKind, ListFilter, PreviewLink, Result, SandboxInfo, SandboxState, SandboxStream,
    SnapshotInfo,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// What a handle last saw of its sandbox: the sandbox, its current session and routes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen {
    pub sandbox: NamedSandbox,
    pub session: Option<Session>,
    pub routes: Vec<Route>,
}

/// A sandbox by name, with what was last seen of it (shared by clones).
#[derive(Debug, Clone)]
pub(crate) struct Handle {
    pub api: Api,
    pub name: String,
    seen: Arc<Mutex<Seen>>,
}

/// The session a command or file call goes to.
#[derive(Debug, Clone)]
pub(crate) struct SessionRef {
    pub id: String,
    /// The session's working directory (relative paths resolve against it).
    pub cwd: String,
}

/// The working directory of Vercel's sandboxes (PROTOCOL.md §4.5), when an answer names none.
const DEFAULT_CWD: &str = "/vercel/sandbox";

impl Handle {
    pub fn new(api: Api, envelope: SandboxEnvelope) -> Handle {
        let handle = Handle {
            api,
            name: envelope.sandbox.name.clone(),
            seen: Arc::default(),
        };
        handle.update(envelope);
        handle
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes in a sandbox answer.
    pub fn update(&self, envelope: SandboxEnvelope) {
        let mut seen = self.lock();
        seen.sandbox = envelope.sandbox;
        if let Some(session) = envelope.session {
            seen.session = Some(session);
            seen.routes = envelope.routes;
        }
    }

    /// Takes in a session answer (routes only when it carried them).
    pub fn update_session(&self, session: Session, routes: Option<Vec<Route>>) {
        let mut seen = self.lock();
        if seen.session.as_ref().is_some_and(|s| s.id != session.id) {
            seen.routes.clear();
        }
        seen.sandbox.current_session_id = Some(session.id.clone());
        seen.session = Some(session);
        if let Some(routes) = routes {
            seen.routes = routes;
        }
    }

    pub fn seen(&self) -> Seen {
        self.lock().clone()
    }

    /// The info of what was last seen.
    pub fn info(&self) -> SandboxInfo {
        let seen = self.lock();
        state::info(&seen.sandbox, seen.session.as_ref())
    }

    /// The session commands and files go to: the current one, when it is not over. A stopped
    /// sandbox is `NotRunning` (resume it first).
    pub fn session(&self, operation: &str) -> Result<SessionRef> {
        let seen = self.lock();
        match &seen.session {
            Some(s) if !s.status.as_deref().is_some_and(state::is_terminal) => Ok(SessionRef {
                id: s.id.clone(),
                cwd: s
                    .cwd
                    .clone()
                    .or_else(|| seen.sandbox.cwd.clone())
                    .unwrap_or_else(|| DEFAULT_CWD.to_owned()),
            }),
            other => Err(Error::new(
                ErrorKind::NotRunning,
                format!(
                    "sandbox {} has no running session ({}): resume() starts one",
                    self.name,
                    other
                        .as_ref()
                        .and_then(|s| s.status.as_deref())
                        .unwrap_or("none")
                ),
            )
            .with_provider(PROVIDER)
            .with_operation(operation)
            .with_sandbox_id(&self.name)),
        }
    }
}

/// `connect(name)`: reads the sandbox without resuming it.
pub(crate) async fn connect(api: &Api, name: &str) -> Result<Handle> {
    if !create::valid_name(name) {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!("no sandbox named {name:?}: Vercel names are 1 to 128 of [a-zA-Z0-9_-]"),
        )
        .with_provider(PROVIDER)
        .with_operation("connect")
        .with_sandbox_id(name));
    }
    let envelope = api.get_sandbox(name, false, "connect").await?;
    Ok(Handle::new(api.clone(), envelope))
}

/// Reads the sandbox again (without resuming it) and returns its info.
pub(crate) async fn refresh(handle: &Handle) -> Result<SandboxInfo> {
    let envelope = handle.api.get_sandbox(&handle.name, false, "info").await?;
    handle.update(envelope);
    Ok(handle.info())
}

/// `resume`: `GET …?resume=true`, which starts a new session for a stopped sandbox.
pub(crate) async fn resume(handle: &Handle) -> Result<()> {
    let envelope = handle.api.get_sandbox(&handle.name, true, "resume").await?;
    handle.update(envelope);
    Ok(())
}

/// `stop`: stops the current session and waits until it is over.
pub(crate) async fn stop(handle: &Handle) -> Result<()> {
    let session = match handle.session("stop") {
        Ok(session) => session,
        // Nothing runs: stopped already.
        Err(e) if e.kind() == ErrorKind::NotRunning => return Ok(()),
        Err(e) => return Err(e),
    };
    let api = &handle.api;
    let answer = api.stop_session(&handle.name, &session.id).await?;
    let mut status = answer.session.status.clone().unwrap_or_default();
    handle.update_session(answer.session, answer.routes);
    let mut backoff = Backoff::new(Duration::from_millis(500)).within(api.settings.stop_timeout);
    while !state::is_terminal(&status) {
        if !backoff.pause().await {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "session of {} did not stop within {:?}; it is {status}",
                    handle.name, api.settings.stop_timeout
                ),
            )
            .with_provider(PROVIDER)
            .with_operation("stop")
            .with_sandbox_id(&handle.name));
        }
        let answer = api.get_session(&handle.name, &session.id, "stop").await?;
        status = answer.session.status.clone().unwrap_or_default();
        handle.update_session(answer.session, answer.routes);
    }
    Ok(())
}

/// `set_timeout(t)`: the running session is made to last until now + `t` (see the module
/// docs); the added time is rounded up to a whole millisecond.
pub(crate) async fn set_timeout(handle: &Handle, timeout: Duration) -> Result<()> {
    let session = handle.session("set_timeout")?;
    let api = &handle.api;
    let (fresh, server_now) = api
        .get_session_dated(&handle.name, &session.id, "set_timeout")
        .await?;
    let s = &fresh.session;
    // The server's clock (its answer's `Date`) when it gave one: the session's times are its.
    let now = server_now
        .unwrap_or_else(SystemTime::now)
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    let started = s.started_at.or(s.created_at).unwrap_or(now);
    let ends = started.saturating_add(s.timeout.unwrap_or(0));
    let wanted = now.saturating_add(timeout.as_millis().min(u64::MAX as u128) as u64);
    handle.update_session(fresh.session, fresh.routes);
    if wanted <= ends {
        tracing::debug!(
            sandbox = %handle.name,
            "set_timeout: the session already lasts that long; Vercel can only extend"
        );
        return Ok(());
    }
    let answer = api
        .extend_timeout(&handle.name, &session.id, wanted - ends)
        .await?;
    handle.update_session(answer.session, answer.routes);
    Ok(())
}

/// `list(filter)`: every page of `GET /v2/sandboxes`, filtered by the first metadata pair (the
/// API takes one tag at a time) and `status=running` when only running sandboxes are asked
/// for; the rest of the filter applies here.
pub(crate) fn list(api: &Api, filter: &ListFilter) -> SandboxStream<'static> {
    let api = api.clone();
    let tag = filter
        .metadata
        .iter()
        .next()
        .map(|(k, v)| (k.clone(), v.clone()));
    let status = (filter.states == [SandboxState::Running]).then_some("running");
    let filter = filter.clone();
    pages(move |cursor: Option<String>| {
        let (api, tag) = (api.clone(), tag.clone());
        async move {
            let page = api
                .list_sandboxes(cursor.as_deref(), tag.as_ref(), status)
                .await?;
            let items: Vec<SandboxInfo> = page
                .sandboxes
                .iter()
                .map(|s| state::info(s, None))
                .collect();
            Ok((items, page.pagination.next))
        }
    })
    .filter(move |item| {
        let keep = item.as_ref().map_or(true, |info| filter.matches(info));
        std::future::ready(keep)
    })
    .boxed()
}

/// `snapshot`: snapshots the current session, which stops it (PROTOCOL.md §10.1).
pub(crate) async fn snapshot(handle: &Handle) -> Result<SnapshotInfo> {
    let session = handle.session("snapshot")?;
    let answer = handle.api.snapshot(&handle.name, &session.id).await?;
    if let Some(session) = answer.session {
        handle.update_session(session, None);
    }
    Ok(snapshot_info(&answer.snapshot, Some(&handle.name)))
}

pub(crate) fn snapshot_info(snapshot: &Snapshot, sandbox: Option<&str>) -> SnapshotInfo {
    SnapshotInfo {
        id: snapshot.id.clone(),
        name: None,
        sandbox_id: sandbox.map(str::to_owned),
        created_at: state::at(snapshot.created_at),
    }
}

/// `fork`: a new sandbox from this one's latest snapshot (PROTOCOL.md §10.2), named `name`,
/// or by Vercel when `None` (as a create without a name is).
pub(crate) async fn fork(handle: &Handle, name: Option<&str>) -> Result<Handle> {
    if let Some(name) = name
        && !create::valid_name(name)
    {
        return Err(Error::validation(format!("invalid sandbox name {name:?}"))
            .with_provider(PROVIDER)
            .with_operation("fork"));
    }
    let body = crate::wire::CreateBody {
        name: name.map(str::to_owned),
        ..Default::default()
    };
    let envelope = handle.api.fork(&handle.name, &body).await?;
    Ok(Handle::new(handle.api.clone(), envelope))
}

/// `preview_link(port)`: the route of a declared port (PROTOCOL.md §8), from the last answer
/// or, when it has none for the port, a fresh read. Public: no token, no headers. Only
/// `https://<subdomain>.vercel.run` is handed out; any other URL in the answer is a
/// `Provider` error.
pub(crate) async fn preview_link(handle: &Handle, port: u16) -> Result<PreviewLink> {
    let find = |routes: &[Route]| {
        routes
            .iter()
            .find(|r| r.port == port && r.system != Some(true))
            .and_then(|r| {
                r.url.clone().or_else(|| {
                    r.subdomain
                        .as_ref()
                        .map(|s| format!("https://{s}.{PREVIEW_DOMAIN}"))
                })
            })
    };
    let mut url = find(&handle.seen().routes);
    if url.is_none() {
        refresh(handle).await?;
        url = find(&handle.seen().routes);
    }
    let url = url.ok_or_else(|| {
        Error::validation(format!(
            "port {port} has no route: Vercel exposes only the ports declared at create \
             (VercelBuilder::expose_port or VercelCreate::ports)"
        ))
        .with_provider(PROVIDER)
        .with_operation("preview_link")
        .with_sandbox_id(&handle.name)
    })?;
    let url = checked_preview_url(&url, &[PREVIEW_DOMAIN])
        .map_err(|e| e.or_context(PROVIDER, "preview_link", Some(&handle.name)))?;
    Ok(PreviewLink {
        url,
        port,
        headers: BTreeMap::new(),
        token: None,
        expires_at: None,
    })
}
