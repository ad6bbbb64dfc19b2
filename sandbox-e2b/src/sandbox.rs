//! [`E2bSandbox`]: one sandbox, through the core [`Sandbox`] trait and E2B-specific methods.

use crate::PROVIDER;
use crate::builder::ENVD_PORT;
use crate::capabilities::CAPABILITIES;
use crate::envd::{Envd, PROCESS_LIST_MAX_BODY, UNARY_MAX_BODY, envd_base_url, port_host};
use crate::error::{Failure, bad_response, map_error};
use crate::files::file_signature;
use crate::process;
use crate::provider::{E2bProvider, ONE_OBJECT_MAX_BODY, Shared};
use crate::wire::{
    ForkBody, ForkResult, ListResponse, LogEntry, LogsWire, NetworkUpdate, PauseBody,
    SandboxCreated, SandboxMetric, Selector, SnapshotBody, SnapshotWire, TimeoutBody,
};
use bytes::Bytes;
use sandbox_sdk_core::http::{Method, checked_answer_host, encode_path_segment};
use sandbox_sdk_core::{
    Capabilities, Command, Download, Error, ErrorKind, FileEventStream, FileInfo, ListOptions,
    Metrics, PreviewLink, Process, ProcessInfo, Result, Sandbox, SandboxInfo, SnapshotInfo,
    SshAccess, Transfer, UploadBody,
};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How [`E2bSandbox::pause_with`] pauses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PauseMode {
    /// Keep memory and running processes (E2B's default).
    #[default]
    Memory,
    /// Keep only the filesystem; processes restart on resume.
    FilesystemOnly,
}

/// Which logs [`E2bSandbox::logs`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogQuery {
    /// Start at this time, in Unix milliseconds.
    pub cursor: Option<u64>,
    /// How many entries (the service's default is 1000).
    pub limit: Option<u32>,
    /// `forward` or `backward`.
    pub direction: Option<String>,
    /// `debug`, `info`, `warn` or `error`.
    pub level: Option<String>,
    /// Text to search for.
    pub search: Option<String>,
}

/// One child of [`E2bSandbox::fork_many`]: the new sandbox, or why it did not start.
pub type ForkOutcome = Result<E2bSandbox>;

/// How to reach a sandbox, as the service's latest answer for it says: replaced when a resume
/// returns another domain or envd token.
#[derive(Clone)]
struct Conn {
    envd: Envd,
    domain: String,
    traffic_token: Option<String>,
}

impl Conn {
    /// From a create/connect answer: its `domain` replaces the client's for envd and hosts
    /// (PROTOCOL.md §0), and its envd token is the one sent.
    ///
    /// The answer's `domain` and sandbox id both become part of host names
    /// (`https://{port}-{id}.{domain}`), so both are checked first: a host name of letters,
    /// digits, `-` and `.` only (the id without `.`). An answer such as `domain: "a@evil.com"`,
    /// `"evil.com/x"` or `"http://…"` is a `Provider` error, and no request (nor the envd
    /// token) goes anywhere it names.
    fn from_answer(shared: &Shared, created: &SandboxCreated) -> Result<Self> {
        let domain = match created.domain.as_deref().filter(|d| !d.is_empty()) {
            Some(domain) => checked_answer_host(domain)
                .map_err(|e| e.with_provider(PROVIDER))?
                .to_owned(),
            None => shared.domain.clone(),
        };
        let id = &created.sandbox_id;
        if id.contains('.') || checked_answer_host(id).is_err() {
            return Err(Error::new(
                ErrorKind::Provider,
                "the provider answered with a sandbox id this SDK will not use: only letters, digits and '-' are allowed",
            )
            .with_provider(PROVIDER)
            .with_retryable(false));
        }
        let base = envd_base_url(shared.sandbox_url.as_deref(), &domain, &created.sandbox_id);
        let http = shared.envd.with_base_url(&base)?;
        let envd = Envd {
            http,
            sandbox_id: created.sandbox_id.clone(),
            access_token: created.envd_access_token.clone(),
            user: shared.user.clone(),
            request_timeout: shared.envd.timeout(),
            stream_idle: shared.stream_idle_timeout,
            transfer_idle: shared.transfer_idle_timeout,
        };
        Ok(Conn {
            envd,
            domain,
            traffic_token: created.traffic_access_token.clone(),
        })
    }
}

/// A running E2B sandbox. Cheap to clone; clones share what a resume learns.
#[derive(Clone)]
pub struct E2bSandbox {
    id: String,
    shared: Arc<Shared>,
    conn: Arc<RwLock<Conn>>,
    envd_version: Option<String>,
    template: Option<String>,
    ttl: Arc<Mutex<Option<Duration>>>,
}

impl fmt::Debug for E2bSandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let conn = self.conn();
        f.debug_struct("E2bSandbox")
            .field("id", &self.id)
            .field("domain", &conn.domain)
            .field("envd", &conn.envd)
            .field(
                "traffic_token",
                &conn.traffic_token.as_ref().map(|_| "<redacted>"),
            )
            .field("envd_version", &self.envd_version)
            .field("template", &self.template)
            .finish()
    }
}

/// The time to live a new sandbox gets when none is asked for: `NewSandboxV2`'s `timeout`
/// default, which the SDKs rely on (PROTOCOL.md §1.2).
const DEFAULT_TTL: Duration = Duration::from_secs(300);

/// Whole seconds, rounded up; saturates for absurd durations (`Duration::MAX`) instead of
/// overflowing, so the service rejects them rather than the caller panicking.
fn secs(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// `SnapshotInfo` on the wire as ours.
pub(crate) fn snapshot_info(s: SnapshotWire, sandbox_id: Option<String>) -> SnapshotInfo {
    SnapshotInfo {
        name: s.names.first().cloned(),
        id: s.snapshot_id,
        sandbox_id,
        created_at: None,
    }
}

/// Compares dotted versions (`0.5.7`); unparsable parts count as 0.
fn version_at_least(version: &str, min: [u64; 3]) -> bool {
    let mut parts = version
        .trim_start_matches('v')
        .split('.')
        .map(|p| p.parse::<u64>().unwrap_or(0));
    let v = [
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    ];
    v >= min
}

impl E2bSandbox {
    pub(crate) fn new(
        shared: Arc<Shared>,
        created: SandboxCreated,
        ttl: Option<Duration>,
    ) -> Result<Self> {
        let conn = Conn::from_answer(&shared, &created)?;
        Ok(E2bSandbox {
            id: created.sandbox_id,
            shared,
            conn: Arc::new(RwLock::new(conn)),
            envd_version: created.envd_version,
            template: created.alias.or(created.template_id),
            ttl: Arc::new(Mutex::new(ttl)),
        })
    }

    fn provider(&self) -> E2bProvider {
        E2bProvider::from_shared(self.shared.clone())
    }

    fn path(&self, suffix: &str) -> String {
        format!("/sandboxes/{}{suffix}", encode_path_segment(&self.id))
    }

    fn conn(&self) -> Conn {
        self.conn.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn envd(&self) -> Envd {
        self.conn().envd
    }

    fn ttl(&self) -> Option<Duration> {
        *self.ttl.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The envd version the sandbox runs, when the service said.
    pub fn envd_version(&self) -> Option<&str> {
        self.envd_version.as_deref()
    }

    /// The domain of the sandbox's hosts, as the service last said.
    pub fn domain(&self) -> String {
        self.conn().domain
    }

    /// The template it was made from, when the service said.
    pub fn template(&self) -> Option<&str> {
        self.template.as_deref()
    }

    /// Kills the sandbox: `true` when killed, `false` when it was already gone.
    pub async fn kill(&self) -> Result<bool> {
        self.provider().kill(&self.id).await
    }

    /// Pauses the sandbox, keeping memory or only the filesystem. `false` when it was already
    /// paused (a 409 saying so); a 409 for a state change in progress is a `Conflict` error.
    pub async fn pause_with(&self, mode: PauseMode) -> Result<bool> {
        let r = self
            .shared
            .api
            .request(Method::Post, &self.path("/pause"))
            .json(&PauseBody {
                memory: mode == PauseMode::Memory,
            })
            .operation("pause")
            .sandbox_id(&self.id)
            .send_empty()
            .await;
        match r {
            Ok(()) => Ok(true),
            // PROTOCOL.md §1.2: 409 on pause is "already paused" (the SDKs return false), but a
            // 409 also answers a sandbox still changing state (REST "state change in progress",
            // the proxy's "still transitioning", §0): that pause did not happen, so only a body
            // saying "already paused" is `false`; any other conflict stays an error.
            Err(e)
                if e.kind() == ErrorKind::Conflict
                    && e.message().to_ascii_lowercase().contains("already paused") =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Resumes (or refreshes) the sandbox through connect with `timeout` as its time to live;
    /// `None` keeps what the caller asked for before. When a TTL applies, the sandbox then lives
    /// exactly that long from now, even if it had more left (connect alone only extends).
    ///
    /// Returns the sandbox as the service answered: the id it returns is the one kept, and a new
    /// `domain` or envd token in the answer is used from now on. When the id is unchanged, this
    /// handle (and its clones) is updated too and the returned handle is a clone of it; when the
    /// service returns another id, use the returned handle.
    pub async fn resume_with(&self, timeout: Option<Duration>) -> Result<E2bSandbox> {
        let timeout = timeout.or_else(|| self.ttl());
        let created = self
            .provider()
            .connect_raw(&self.id, timeout, "resume")
            .await?;
        if created.sandbox_id != self.id {
            return E2bSandbox::new(self.shared.clone(), created, timeout);
        }
        let conn = Conn::from_answer(&self.shared, &created)?;
        *self.conn.write().unwrap_or_else(|p| p.into_inner()) = conn;
        *self.ttl.lock().unwrap_or_else(|p| p.into_inner()) = timeout;
        Ok(self.clone())
    }

    /// Forks into `count` children (1..=100); each child is reported on its own, so a partial
    /// failure leaves the others usable. Each child lives as long as the caller asked for this
    /// sandbox, or 300 s (the create default) when nothing was asked.
    pub async fn fork_many(&self, count: u32) -> Result<Vec<ForkOutcome>> {
        if !(1..=100).contains(&count) {
            return Err(Error::validation("fork count must be between 1 and 100")
                .with_provider(PROVIDER)
                .with_operation("fork"));
        }
        // PROTOCOL.md §1.2: the fork endpoint's own `timeout` default is 15 s, while a create
        // (`POST /v2/sandboxes`, `NewSandboxV2`) defaults to 300 s, which is what the SDKs use. So
        // the TTL is always sent: the one the caller asked for the parent, else that 300 s.
        let ttl = self.ttl().unwrap_or(DEFAULT_TTL);
        let results: Vec<ForkResult> = self
            .shared
            .api
            .request(Method::Post, &self.path("/fork"))
            .json(&ForkBody {
                count,
                timeout: Some(secs(ttl)),
            })
            .operation("fork")
            .sandbox_id(&self.id)
            .max_body(ONE_OBJECT_MAX_BODY)
            .send_json()
            .await?;
        Ok(results
            .into_iter()
            .map(|r| match (r.sandbox, r.error) {
                (Some(created), _) => E2bSandbox::new(self.shared.clone(), created, Some(ttl)),
                (None, error) => {
                    let (status, message) =
                        error.map(|e| (e.code, e.message)).unwrap_or((None, None));
                    let status = status.and_then(|s| u16::try_from(s).ok()).unwrap_or(500);
                    let body = serde_json::json!({
                        "code": status,
                        "message": message.unwrap_or_else(|| "fork failed".into()),
                    })
                    .to_string();
                    Err(map_error(Failure {
                        status,
                        body: body.as_bytes(),
                        retry_after: None,
                        should_retry: None,
                        operation: "fork",
                        sandbox_id: Some(&self.id),
                        request_id: None,
                    }))
                }
            })
            .collect())
    }

    /// Replaces the sandbox's egress rules (`PUT /sandboxes/{id}/network`).
    pub async fn update_network(&self, update: &NetworkUpdate) -> Result<()> {
        self.shared
            .api
            .request(Method::Put, &self.path("/network"))
            .json(update)
            .operation("update_network")
            .sandbox_id(&self.id)
            .send_empty()
            .await
    }

    /// Resource samples between `start` and `end` (Unix seconds), oldest first.
    pub async fn metrics_range(
        &self,
        start: Option<u64>,
        end: Option<u64>,
    ) -> Result<Vec<Metrics>> {
        let mut req = self
            .shared
            .api
            .request(Method::Get, &self.path("/metrics"))
            .operation("metrics")
            .sandbox_id(&self.id);
        if let Some(s) = start {
            req = req.query("start", s);
        }
        if let Some(e) = end {
            req = req.query("end", e);
        }
        let samples: Vec<SandboxMetric> = req.send_json().await?;
        Ok(samples.into_iter().map(metrics).collect())
    }

    /// The sandbox's logs (`GET /v2/sandboxes/{id}/logs`).
    pub async fn logs(&self, query: &LogQuery) -> Result<Vec<LogEntry>> {
        let mut req = self
            .shared
            .api
            .request(
                Method::Get,
                &format!("/v2/sandboxes/{}/logs", encode_path_segment(&self.id)),
            )
            .operation("logs")
            .sandbox_id(&self.id);
        if let Some(c) = query.cursor {
            req = req.query("cursor", c);
        }
        if let Some(l) = query.limit {
            req = req.query("limit", l);
        }
        if let Some(d) = &query.direction {
            req = req.query("direction", d);
        }
        if let Some(l) = &query.level {
            req = req.query("level", l);
        }
        if let Some(s) = &query.search {
            req = req.query("search", s);
        }
        let logs: LogsWire = req.send_json().await?;
        Ok(logs.logs)
    }

    /// Sends SIGTERM (`graceful`) or SIGKILL to a process by pid or tag.
    pub async fn signal_process(&self, pid_or_tag: &str, graceful: bool) -> Result<()> {
        let signal = if graceful {
            "SIGNAL_SIGTERM"
        } else {
            "SIGNAL_SIGKILL"
        };
        process::send_signal(&self.envd(), Selector::parse(pid_or_tag), signal).await
    }

    /// Writes several files in one multipart request (one part per file).
    pub async fn write_files(&self, files: Vec<(String, Bytes)>) -> Result<Transfer> {
        let mut form = sandbox_sdk_core::http::Multipart::new();
        let mut total = 0u64;
        for (path, data) in files {
            sandbox_sdk_core::validate_path(&path)?;
            total += data.len() as u64;
            form = form.bytes("file", &path, "application/octet-stream", data);
        }
        let envd = self.envd();
        let mut req = envd.request(Method::Post, "/files", "write_file");
        if let Some(user) = &envd.user {
            req = req.query("username", user);
        }
        let _written: Vec<crate::wire::WrittenEntry> = req
            .multipart(form)
            .max_body(UNARY_MAX_BODY)
            .send_json()
            .await?;
        Ok(Transfer {
            bytes: total,
            emulated: false,
        })
    }

    fn signed_url(
        &self,
        path: &str,
        operation: &str,
        user: Option<&str>,
        expires_in: Option<Duration>,
    ) -> Result<String> {
        sandbox_sdk_core::validate_path(path)?;
        let conn = self.conn();
        let token = conn.envd.access_token.as_deref().ok_or_else(|| {
            Error::new(
                ErrorKind::NotSupported,
                "this sandbox has no envd access token, so its file URLs need no signature",
            )
            .with_provider(PROVIDER)
            .with_sandbox_id(&self.id)
        })?;
        let user = user.or(conn.envd.user.as_deref());
        let expiration = expires_in.map(|d| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs()
                .saturating_add(secs(d))
        });
        let signature = file_signature(path, operation, user.unwrap_or(""), token, expiration);
        let mut url = url::Url::parse(&format!(
            "https://{}/files",
            port_host(ENVD_PORT, &self.id, &conn.domain)
        ))
        .map_err(|e| Error::validation(format!("invalid sandbox URL: {e}")))?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("path", path);
            if let Some(user) = user {
                q.append_pair("username", user);
            }
            q.append_pair("signature", &signature);
            if let Some(exp) = expiration {
                q.append_pair("signature_expiration", &exp.to_string());
            }
        }
        Ok(url.into())
    }

    /// A signed URL that downloads `path` without headers (for secure sandboxes), valid for
    /// `expires_in` when given. It contains a signature: treat it as a secret.
    pub fn download_url(&self, path: &str, expires_in: Option<Duration>) -> Result<String> {
        self.signed_url(path, "read", None, expires_in)
    }

    /// A signed URL that accepts an upload of `path` (`POST`, multipart or raw).
    pub fn upload_url(&self, path: &str, expires_in: Option<Duration>) -> Result<String> {
        self.signed_url(path, "write", None, expires_in)
    }
}

pub(crate) fn metrics(m: SandboxMetric) -> Metrics {
    let timestamp = m
        .timestamp_unix
        .and_then(|t| u64::try_from(t).ok())
        .map(|t| UNIX_EPOCH + Duration::from_secs(t))
        .or_else(|| {
            m.timestamp
                .as_deref()
                .and_then(sandbox_sdk_core::time::parse_rfc3339)
        });
    Metrics {
        timestamp,
        cpu_percent: m.cpu_used_pct,
        cpu_count: m.cpu_count,
        memory_used_bytes: m.mem_used,
        memory_total_bytes: m.mem_total,
        disk_used_bytes: m.disk_used,
        disk_total_bytes: m.disk_total,
    }
}

#[async_trait::async_trait]
impl Sandbox for E2bSandbox {
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
        self.provider().get_info(&self.id).await
    }

    async fn exec(&self, command: &Command) -> Result<Process> {
        process::start(&self.envd(), command).await
    }

    async fn processes(&self) -> Result<Vec<ProcessInfo>> {
        let list: ListResponse = self
            .envd()
            .unary_capped(
                "process.Process/List",
                "processes",
                &serde_json::json!({}),
                PROCESS_LIST_MAX_BODY,
            )
            .await?;
        Ok(list
            .processes
            .into_iter()
            .map(|p| {
                let mut argv = vec![p.config.cmd];
                argv.extend(p.config.args);
                ProcessInfo {
                    pid: p.pid.to_string(),
                    tag: p.tag,
                    argv,
                    cwd: p.config.cwd,
                    running: true,
                }
            })
            .collect())
    }

    async fn attach(&self, pid: &str) -> Result<Process> {
        process::attach(&self.envd(), Selector::parse(pid)).await
    }

    async fn kill_process(&self, pid: &str) -> Result<()> {
        process::send_signal(&self.envd(), Selector::parse(pid), "SIGNAL_SIGKILL").await
    }

    async fn upload(&self, path: &str, body: UploadBody) -> Result<Transfer> {
        let raw_ok = self
            .envd_version
            .as_deref()
            .is_none_or(|v| version_at_least(v, [0, 5, 7]));
        self.envd().upload_stream(path, body, raw_ok).await
    }

    async fn write_file(&self, path: &str, data: Bytes) -> Result<Transfer> {
        self.envd().upload_multipart(path, data).await
    }

    async fn download(&self, path: &str) -> Result<Download> {
        self.envd().download(path).await
    }

    async fn list_files(&self, path: &str, options: ListOptions) -> Result<Vec<FileInfo>> {
        self.envd().list_dir(path, options).await
    }

    async fn stat(&self, path: &str) -> Result<FileInfo> {
        self.envd().stat(path).await
    }

    async fn mkdir(&self, path: &str) -> Result<()> {
        self.envd().make_dir(path).await
    }

    async fn remove(&self, path: &str) -> Result<()> {
        self.envd().remove(path).await
    }

    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.envd().rename(from, to).await
    }

    async fn watch(&self, path: &str, recursive: bool) -> Result<FileEventStream> {
        self.envd().watch(path, recursive).await
    }

    async fn stop(&self) -> Result<()> {
        Err(Error::not_supported(PROVIDER, "stop").with_sandbox_id(&self.id))
    }

    async fn pause(&self) -> Result<()> {
        self.pause_with(PauseMode::Memory).await.map(drop)
    }

    async fn resume(&self) -> Result<()> {
        let resumed = self.resume_with(None).await?;
        if resumed.id != self.id {
            // This handle's id cannot change under the trait; the inherent `resume_with`
            // hands back the sandbox under the id the service kept.
            return Err(Error::new(
                ErrorKind::Provider,
                format!(
                    "sandbox {} was resumed as sandbox {}; use E2bSandbox::resume_with or connect to that id",
                    self.id, resumed.id
                ),
            )
            .with_provider(PROVIDER)
            .with_operation("resume")
            .with_sandbox_id(&self.id));
        }
        Ok(())
    }

    async fn destroy(&self) -> Result<()> {
        sandbox_sdk_core::Provider::destroy(
            &E2bProvider::from_shared(self.shared.clone()),
            &self.id,
        )
        .await
    }

    async fn set_timeout(&self, timeout: Duration) -> Result<()> {
        self.shared
            .api
            .request(Method::Post, &self.path("/timeout"))
            .json(&TimeoutBody {
                timeout: secs(timeout),
            })
            .operation("set_timeout")
            .sandbox_id(&self.id)
            .send_empty()
            .await?;
        *self.ttl.lock().unwrap_or_else(|p| p.into_inner()) = Some(timeout);
        Ok(())
    }

    async fn preview_link(&self, port: u16) -> Result<PreviewLink> {
        if port == 0 {
            return Err(Error::validation("port 0 cannot be exposed").with_provider(PROVIDER));
        }
        let conn = self.conn();
        let mut headers = BTreeMap::new();
        if let Some(token) = &conn.traffic_token {
            headers.insert("e2b-traffic-access-token".to_owned(), token.clone());
        }
        Ok(PreviewLink {
            url: format!("https://{}", port_host(port, &self.id, &conn.domain)),
            port,
            headers,
            token: conn.traffic_token,
            expires_at: None,
        })
    }

    async fn ssh_access(&self, _ttl: Duration) -> Result<SshAccess> {
        Err(Error::not_supported(PROVIDER, "ssh_access").with_sandbox_id(&self.id))
    }

    async fn fork(&self) -> Result<Box<dyn Sandbox>> {
        let mut children = self.fork_many(1).await?;
        match children.pop() {
            Some(child) => Ok(Box::new(child?)),
            None => Err(bad_response("fork", Some(&self.id), "no fork result")),
        }
    }

    async fn snapshot(&self, name: Option<&str>) -> Result<SnapshotInfo> {
        let s: SnapshotWire = self
            .shared
            .api
            .request(Method::Post, &self.path("/snapshots"))
            .json(&SnapshotBody {
                name: name.map(str::to_owned),
            })
            .operation("snapshot")
            .sandbox_id(&self.id)
            .max_body(ONE_OBJECT_MAX_BODY)
            .send_json()
            .await?;
        Ok(snapshot_info(s, Some(self.id.clone())))
    }

    async fn metrics(&self) -> Result<Metrics> {
        let mut samples = self.metrics_range(None, None).await?;
        Ok(samples.pop().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare() {
        assert!(version_at_least("0.6.13", [0, 5, 7]));
        assert!(version_at_least("0.5.7", [0, 5, 7]));
        assert!(!version_at_least("0.5.6", [0, 5, 7]));
        assert!(!version_at_least("0.4", [0, 5, 7]));
    }

    #[test]
    fn metric_sample_maps_to_metrics() {
        let m: SandboxMetric = serde_json::from_str(
            r#"{"timestamp":"2026-01-01T00:00:00Z","timestampUnix":1767225600,"cpuCount":2,"cpuUsedPct":12.5,"memUsed":100,"memTotal":200,"memCache":5,"diskUsed":10,"diskTotal":20}"#,
        )
        .unwrap();
        let m = metrics(m);
        assert_eq!(m.cpu_percent, Some(12.5));
        assert_eq!(m.memory_total_bytes, Some(200));
        assert_eq!(
            m.timestamp,
            Some(UNIX_EPOCH + Duration::from_secs(1_767_225_600))
        );
    }
}
