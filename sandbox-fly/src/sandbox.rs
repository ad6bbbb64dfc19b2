//! [`FlySandbox`]: one Fly Machine driven through the core [`Sandbox`] trait, plus Fly's own
//! operations (wait, leases, update, stop with a signal, forced destroy) as inherent methods.

use crate::api::{Api, Destroy};
use crate::capabilities::CAPABILITIES;
use crate::config::{FORCE_INSTANCE_HEADER, PROVIDER};
use crate::exec;
use crate::files;
use crate::lifecycle::{map_state, to_info};
use crate::wire::{
    Lease, LeaseRequest, Machine, MachineConfig, StopRequest, UpdateMachineRequest, WaitResponse,
};
use async_trait::async_trait;
use bytes::Bytes;
use sandbox_sdk_core::code::kernel::EmulatedKernels;
use sandbox_sdk_core::code::{CodeContext, CodeRun, ContextSpec, RunCode};
use sandbox_sdk_core::{
    Capabilities, Command, Download, Error, ErrorKind, FileInfo, ListOptions, Output, PreviewLink,
    Process, ProcessInfo, Result, Sandbox, SandboxInfo, SandboxState, Transfer, UploadBody,
};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One Fly Machine. Cheap to clone; clones share the cached machine and the lease nonce.
#[derive(Clone)]
pub struct FlySandbox {
    api: Api,
    id: String,
    machine: Arc<Mutex<Machine>>,
    nonce: Arc<Mutex<Option<String>>>,
    seq: Arc<std::sync::atomic::AtomicU64>,
    kernels: EmulatedKernels,
}

impl fmt::Debug for FlySandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlySandbox")
            .field("app", &self.api.settings.app)
            .field("id", &self.id)
            .field("leased", &self.lease_nonce().is_some())
            .finish()
    }
}

/// A Go duration for the stop body: whole seconds as `10s`, anything finer in milliseconds
/// (`1500ms`), so a sub-second grace period does not become `0s` (an immediate kill).
fn go_duration(t: Duration) -> String {
    if t.subsec_nanos() == 0 {
        format!("{}s", t.as_secs())
    } else {
        format!("{}ms", t.as_millis().max(1))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl FlySandbox {
    pub(crate) fn new(api: Api, machine: Machine) -> FlySandbox {
        let nonce = machine.nonce.clone();
        let kernels =
            EmulatedKernels::new().with_mailbox(Arc::new(files::Mailbox::new(&api, &machine.id)));
        FlySandbox {
            api,
            id: machine.id.clone(),
            machine: Arc::new(Mutex::new(machine)),
            nonce: Arc::new(Mutex::new(nonce)),
            seq: Arc::new(std::sync::atomic::AtomicU64::new(1)),
            kernels,
        }
    }

    /// The machine as last fetched (from create, connect, info, update or a wait).
    pub fn machine(&self) -> Machine {
        lock(&self.machine).clone()
    }

    fn set_state(&self, state: &str) {
        lock(&self.machine).state = Some(state.to_owned());
    }

    fn version(&self) -> Option<String> {
        lock(&self.machine).instance_id.clone()
    }

    /// Fetches the machine again and caches it.
    pub async fn refresh(&self) -> Result<Machine> {
        let machine = self.api.get(&self.id).await?;
        *lock(&self.machine) = machine.clone();
        Ok(machine)
    }

    /// Waits until the machine reaches `state` (`started`, `stopped`, `suspended`, `destroyed`,
    /// `failed` or `settled`). Fly caps one `/wait` at 60 s, so longer deadlines chain calls;
    /// running out is a `Timeout` that names the state the machine was in.
    pub async fn wait_for_state(&self, state: &str, deadline: Duration) -> Result<WaitResponse> {
        let version = self.version();
        let resp = self
            .api
            .wait_for(&self.id, state, version.as_deref(), deadline)
            .await?;
        self.set_state(resp.state.as_deref().unwrap_or(state));
        Ok(resp)
    }

    /// Makes sure the machine is started: waits when it is on its way, starts it when stopped or
    /// suspended, and refuses terminal states.
    pub(crate) async fn ensure_started(&self) -> Result<()> {
        let state = lock(&self.machine).state.clone().unwrap_or_default();
        match map_state(&state) {
            SandboxState::Running => Ok(()),
            SandboxState::Stopped | SandboxState::Paused => {
                // On its way down: let it settle first, since start refuses a transient state.
                let settle = match state.as_str() {
                    "stopping" => Some("stopped"),
                    "suspending" => Some("suspended"),
                    _ => None,
                };
                if let Some(target) = settle {
                    self.wait_for_state(target, self.api.settings.start_timeout)
                        .await?;
                }
                self.start().await
            }
            SandboxState::Destroyed | SandboxState::Failed => Err(Error::new(
                ErrorKind::NotRunning,
                format!("machine is {state}"),
            )
            .with_provider(PROVIDER)
            .with_sandbox_id(&self.id)),
            _ => self
                .wait_for_state("started", self.api.settings.start_timeout)
                .await
                .map(drop),
        }
    }

    // ---- leases ----

    /// The lease nonce this handle holds, if any (sent on every mutation).
    pub fn lease_nonce(&self) -> Option<String> {
        lock(&self.nonce).clone()
    }

    /// Uses a nonce obtained elsewhere (another process's lease) for this handle's mutations.
    pub fn set_lease_nonce(&self, nonce: Option<String>) {
        *lock(&self.nonce) = nonce;
    }

    /// Takes a lease for `ttl` (whole seconds, at least 1). Its nonce is kept and sent with every
    /// later mutation from this handle. A lease held by someone else is a `Conflict` naming them.
    pub async fn acquire_lease(&self, ttl: Duration, description: Option<&str>) -> Result<Lease> {
        let body = LeaseRequest {
            ttl: ttl.as_secs().max(1),
            description: description.map(str::to_owned),
        };
        let lease = self.api.acquire_lease(&self.id, &body, None).await?;
        if let Some(nonce) = &lease.nonce {
            self.set_lease_nonce(Some(nonce.clone()));
        }
        Ok(lease)
    }

    /// Extends the lease this handle holds to `ttl` from now.
    pub async fn refresh_lease(&self, ttl: Duration) -> Result<Lease> {
        let nonce = self.require_nonce("refresh_lease")?;
        let body = LeaseRequest {
            ttl: ttl.as_secs().max(1),
            description: None,
        };
        let lease = self
            .api
            .acquire_lease(&self.id, &body, Some(&nonce))
            .await?;
        if let Some(nonce) = &lease.nonce {
            self.set_lease_nonce(Some(nonce.clone()));
        }
        Ok(lease)
    }

    /// Releases the lease this handle holds.
    pub async fn release_lease(&self) -> Result<()> {
        let nonce = self.require_nonce("release_lease")?;
        self.api.release_lease(&self.id, &nonce).await?;
        self.set_lease_nonce(None);
        Ok(())
    }

    /// The machine's current lease (`NotFound` when there is none). The nonce is only returned
    /// to its holder.
    pub async fn lease(&self) -> Result<Lease> {
        self.api.get_lease(&self.id).await
    }

    fn require_nonce(&self, op: &str) -> Result<String> {
        self.lease_nonce().ok_or_else(|| {
            Error::validation("this handle holds no lease; call acquire_lease first")
                .with_provider(PROVIDER)
                .with_operation(op)
                .with_sandbox_id(&self.id)
        })
    }

    // ---- lifecycle ----

    /// Starts a stopped or suspended machine (a suspended one resumes from its snapshot when it
    /// can) and waits until it is `started`.
    pub async fn start(&self) -> Result<()> {
        let nonce = self.lease_nonce();
        match self
            .api
            .action(&self.id, "start", None, nonce.as_deref())
            .await
        {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Conflict && e.status() == Some(412) => {
                // "unable to start machine from current state": fine if it is already running.
                if self.refresh().await?.state.as_deref() != Some("started") {
                    return Err(e);
                }
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        self.set_state("starting");
        self.wait_for_state("started", self.api.settings.start_timeout)
            .await
            .map(drop)
    }

    /// Stops the machine with an optional signal (`SIGTERM`, `SIGKILL`, …) and grace period, and
    /// waits until it is `stopped`. The root filesystem resets on the next start unless the
    /// config persists it; volumes are kept.
    pub async fn stop_with(&self, signal: Option<&str>, timeout: Option<Duration>) -> Result<()> {
        let body = StopRequest {
            signal: signal.map(str::to_owned),
            timeout: timeout.map(go_duration),
        };
        let nonce = self.lease_nonce();
        self.api
            .action(&self.id, "stop", Some(&body), nonce.as_deref())
            .await?;
        self.set_state("stopping");
        self.wait_for_state("stopped", self.api.settings.start_timeout)
            .await
            .map(drop)
    }

    /// Suspends the machine (memory snapshot kept) and waits until it is `suspended`.
    pub async fn suspend(&self) -> Result<()> {
        let nonce = self.lease_nonce();
        self.api
            .action(&self.id, "suspend", None, nonce.as_deref())
            .await?;
        self.set_state("suspending");
        self.wait_for_state("suspended", self.api.settings.start_timeout)
            .await
            .map(drop)
    }

    /// Destroys the machine; `force` kills it even when running. A machine already gone is `NotFound`.
    pub async fn destroy_with(&self, force: bool) -> Result<()> {
        let nonce = self.lease_nonce();
        let mode = if force {
            Destroy::Force
        } else {
            Destroy::Plain
        };
        self.api.destroy(&self.id, mode, nonce.as_deref()).await?;
        self.set_state("destroyed");
        Ok(())
    }

    /// Replaces the machine's config (Fly has no partial updates: start from
    /// [`FlySandbox::machine`]`().config`). Sends the current version so a concurrent change is
    /// a `Conflict`, and the lease nonce when held. The machine restarts with the new config.
    pub async fn update(&self, config: MachineConfig) -> Result<Machine> {
        let body = UpdateMachineRequest {
            config,
            current_version: self.version(),
            skip_launch: None,
        };
        let nonce = self.lease_nonce();
        let machine = self.api.update(&self.id, &body, nonce.as_deref()).await?;
        *lock(&self.machine) = machine.clone();
        Ok(machine)
    }

    /// Runs `command` through one buffered `/exec` (no live output), with the command's timeout
    /// capped at the exec deadline (the deadline when unset). Past it, `Timeout`.
    pub async fn exec_buffered(&self, command: &Command) -> Result<Output> {
        exec::buffered(&self.api, &self.id, command).await
    }
}

#[async_trait]
impl Sandbox for FlySandbox {
    fn id(&self) -> &str {
        &self.id
    }

    fn provider(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    async fn info(&self) -> Result<SandboxInfo> {
        Ok(to_info(&self.refresh().await?))
    }

    /// Foreground commands with a timeout within the direct limit run through one buffered
    /// `/exec`; all others use the background-and-poll emulation (live output polled by offset,
    /// killable, the exit code recorded in the machine).
    async fn exec(&self, command: &Command) -> Result<Process> {
        exec::start(&self.api, &self.id, command, &self.seq).await
    }

    async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        exec::processes(&self.api, &self.id).await
    }

    async fn attach(&self, pid: &str) -> Result<Process> {
        exec::attach(&self.api, &self.id, pid).await
    }

    async fn kill_process(&self, pid: &str) -> Result<()> {
        exec::kill(&self.api, &self.id, pid).await
    }

    async fn upload(&self, path: &str, body: UploadBody) -> Result<Transfer> {
        files::on(&self.api, &self.id).upload(path, body).await
    }

    async fn write_file(&self, path: &str, data: Bytes) -> Result<Transfer> {
        files::on(&self.api, &self.id).write_file(path, data).await
    }

    async fn download(&self, path: &str) -> Result<Download> {
        files::on(&self.api, &self.id).download(path).await
    }

    async fn list_files(&self, path: &str, options: ListOptions) -> Result<Vec<FileInfo>> {
        files::on(&self.api, &self.id).list(path, options).await
    }

    async fn stat(&self, path: &str) -> Result<FileInfo> {
        files::on(&self.api, &self.id).stat(path).await
    }

    async fn mkdir(&self, path: &str) -> Result<()> {
        files::on(&self.api, &self.id).mkdir(path).await
    }

    async fn remove(&self, path: &str) -> Result<()> {
        files::on(&self.api, &self.id).remove(path).await
    }

    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        files::on(&self.api, &self.id).rename(from, to).await
    }

    async fn stop(&self) -> Result<()> {
        self.stop_with(None, None).await
    }

    async fn pause(&self) -> Result<()> {
        self.suspend().await
    }

    async fn resume(&self) -> Result<()> {
        self.start().await
    }

    async fn destroy(&self) -> Result<()> {
        self.destroy_with(true).await
    }

    /// `https://{app}.fly.dev` (or the builder's public host) when the machine has a service for
    /// `port`, with `fly-force-instance-id` pinning requests to this machine. Otherwise a
    /// `Validation` error saying what is missing.
    async fn preview_link(&self, port: u16) -> Result<PreviewLink> {
        let machine = self.machine();
        let services = machine
            .config
            .as_ref()
            .map(|c| c.services.clone())
            .unwrap_or_default();
        if !services.iter().any(|s| s.internal_port == Some(port)) {
            let exposed: Vec<String> = services
                .iter()
                .filter_map(|s| s.internal_port.map(|p| p.to_string()))
                .collect();
            let what = if exposed.is_empty() {
                "the machine has no services".to_owned()
            } else {
                format!(
                    "the machine's services expose only port(s) {}",
                    exposed.join(", ")
                )
            };
            return Err(Error::validation(format!(
                "port {port} is not reachable from outside: {what}; create the machine with \
                 FlyBuilder::expose_port({port}) (and give the app a public IP)"
            ))
            .with_provider(PROVIDER)
            .with_operation("preview_link")
            .with_sandbox_id(&self.id));
        }
        let host = self
            .api
            .settings
            .public_host
            .clone()
            .unwrap_or_else(|| format!("{}.fly.dev", self.api.settings.app));
        let mut headers = BTreeMap::new();
        headers.insert(FORCE_INSTANCE_HEADER.to_owned(), self.id.clone());
        Ok(PreviewLink {
            url: format!("https://{host}"),
            port,
            headers,
            token: None,
            expires_at: None,
        })
    }

    async fn create_code_context(&self, spec: &ContextSpec) -> Result<CodeContext> {
        self.kernels.create_context(self, spec).await
    }

    async fn list_code_contexts(&self) -> Result<Vec<CodeContext>> {
        self.kernels.list_contexts().await
    }

    async fn restart_code_context(&self, id: &str) -> Result<()> {
        self.kernels.restart_context(self, id).await
    }

    async fn remove_code_context(&self, id: &str) -> Result<()> {
        self.kernels.remove_context(self, id).await
    }

    async fn run_code(&self, request: &RunCode) -> Result<CodeRun> {
        self.kernels.run_code(self, request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_grace_periods_keep_their_precision() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(go_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(go_duration(Duration::from_nanos(1)), "1ms");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }
}
