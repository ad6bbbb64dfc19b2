//! The control plane (`https://api.{domain}`, PROTOCOL.md §2): one method per endpoint, each
//! sending exactly the request it names and decoding the answer into a wire type.

use super::Api;
use crate::config::ONE_OBJECT_MAX_BODY;
use crate::wire::{
    ConnectBody, ForkBody, ForkResult, LogEntry, LogsWire, NetworkUpdate, NewSandbox, NewVolume,
    PauseBody, SandboxCreated, SandboxDetail, SandboxMetric, SandboxesMetrics, SnapshotBody,
    SnapshotWire, TemplateAlias, TemplateBuildStart, TemplateBuildStatus, TemplateCreate,
    TemplateCreated, TemplateWithBuilds, TimeoutBody, Volume,
};
use futures::stream::BoxStream;
use sandbox_sdk_core::Result;
use sandbox_sdk_core::http::{Method, Request, encode_path_segment};
use std::collections::BTreeMap;

/// The header E2B dedupes `POST /v2/sandboxes` by (E2B SDK 2.63 sends it on every try of a
/// create, PROTOCOL.md §2.4).
pub(crate) const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";

/// `/sandboxes/{id}{suffix}`, the id encoded as one path segment.
fn sandbox_path(id: &str, suffix: &str) -> String {
    format!("/sandboxes/{}{suffix}", encode_path_segment(id))
}

/// `k=v&k2=v2`, URL-encoded, as the `metadata` query value (PROTOCOL.md §2.3).
fn metadata_query(metadata: &BTreeMap<String, String>) -> String {
    let mut out = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in metadata {
        out.append_pair(k, v);
    }
    out.finish()
}

impl Api {
    /// `POST /v2/sandboxes`, with `Idempotency-Key: {idempotency_key}` when given.
    pub async fn create_sandbox(
        &self,
        body: &NewSandbox,
        idempotency_key: Option<&str>,
    ) -> Result<SandboxCreated> {
        let mut request = self
            .control
            .request(Method::Post, "/v2/sandboxes")
            .json(body)
            .operation("create")
            .max_body(ONE_OBJECT_MAX_BODY);
        if let Some(key) = idempotency_key {
            request = request.header(IDEMPOTENCY_HEADER, key);
        }
        request.send_json().await
    }

    /// `POST /v2/sandboxes/{id}/connect`: resumes a paused sandbox; `timeout` (seconds) only
    /// ever extends its time to live.
    pub async fn connect_sandbox(
        &self,
        id: &str,
        timeout: Option<u64>,
        operation: &str,
    ) -> Result<SandboxCreated> {
        self.control
            .request(
                Method::Post,
                &format!("/v2/sandboxes/{}/connect", encode_path_segment(id)),
            )
            .json(&ConnectBody { timeout })
            .operation(operation)
            .sandbox_id(id)
            .max_body(ONE_OBJECT_MAX_BODY)
            .send_json()
            .await
    }

    /// `POST /sandboxes/{id}/timeout`: the sandbox lives `seconds` from now, shorter or longer.
    pub async fn set_timeout(&self, id: &str, seconds: u64, operation: &str) -> Result<()> {
        self.control
            .request(Method::Post, &sandbox_path(id, "/timeout"))
            .json(&TimeoutBody { timeout: seconds })
            .operation(operation)
            .sandbox_id(id)
            .send_empty()
            .await
    }

    /// `GET /sandboxes/{id}`.
    pub async fn get_sandbox(&self, id: &str) -> Result<SandboxDetail> {
        self.control
            .request(Method::Get, &sandbox_path(id, ""))
            .operation("info")
            .sandbox_id(id)
            .max_body(ONE_OBJECT_MAX_BODY)
            .send_json()
            .await
    }

    /// `DELETE /sandboxes/{id}`.
    pub async fn kill_sandbox(&self, id: &str) -> Result<()> {
        self.control
            .request(Method::Delete, &sandbox_path(id, ""))
            .operation("destroy")
            .sandbox_id(id)
            .send_empty()
            .await
    }

    /// `GET /v2/sandboxes`, page by page as the stream is polled: sandboxes carrying every
    /// label of `metadata`, in one of `states` (all when empty), `limit` per page.
    pub fn list_sandboxes(
        &self,
        metadata: &BTreeMap<String, String>,
        states: &[String],
        limit: Option<u32>,
    ) -> BoxStream<'static, Result<SandboxDetail>> {
        let api = self.control.clone();
        let metadata = (!metadata.is_empty()).then(|| metadata_query(metadata));
        let states = (!states.is_empty()).then(|| states.join(","));
        paged(move || {
            let mut req = api.request(Method::Get, "/v2/sandboxes").operation("list");
            if let Some(m) = &metadata {
                req = req.query("metadata", m);
            }
            if let Some(s) = &states {
                req = req.query("state", s);
            }
            if let Some(l) = limit {
                req = req.query("limit", l);
            }
            req
        })
    }

    /// `POST /sandboxes/{id}/pause`, keeping memory or only the filesystem.
    pub async fn pause_sandbox(&self, id: &str, memory: bool) -> Result<()> {
        self.control
            .request(Method::Post, &sandbox_path(id, "/pause"))
            .json(&PauseBody { memory })
            .operation("pause")
            .sandbox_id(id)
            .send_empty()
            .await
    }

    /// `POST /sandboxes/{id}/fork`: `count` children living `timeout` seconds each.
    pub async fn fork_sandbox(
        &self,
        id: &str,
        count: u32,
        timeout: u64,
    ) -> Result<Vec<ForkResult>> {
        self.control
            .request(Method::Post, &sandbox_path(id, "/fork"))
            .json(&ForkBody {
                count,
                timeout: Some(timeout),
            })
            .operation("fork")
            .sandbox_id(id)
            .max_body(ONE_OBJECT_MAX_BODY)
            .send_json()
            .await
    }

    /// `PUT /sandboxes/{id}/network`: replaces the egress rules.
    pub async fn update_network(&self, id: &str, update: &NetworkUpdate) -> Result<()> {
        self.control
            .request(Method::Put, &sandbox_path(id, "/network"))
            .json(update)
            .operation("update_network")
            .sandbox_id(id)
            .send_empty()
            .await
    }

    /// `GET /sandboxes/{id}/metrics`, between `start` and `end` (Unix seconds) when given.
    pub async fn sandbox_metrics(
        &self,
        id: &str,
        start: Option<u64>,
        end: Option<u64>,
    ) -> Result<Vec<SandboxMetric>> {
        let mut req = self
            .control
            .request(Method::Get, &sandbox_path(id, "/metrics"))
            .operation("metrics")
            .sandbox_id(id);
        if let Some(s) = start {
            req = req.query("start", s);
        }
        if let Some(e) = end {
            req = req.query("end", e);
        }
        req.send_json().await
    }

    /// `GET /sandboxes/metrics?sandbox_ids=a,b`: the latest sample of each.
    pub async fn metrics_of(&self, sandbox_ids: &[&str]) -> Result<SandboxesMetrics> {
        self.control
            .request(Method::Get, "/sandboxes/metrics")
            .query("sandbox_ids", sandbox_ids.join(","))
            .operation("metrics")
            .send_json()
            .await
    }

    /// `GET /v2/sandboxes/{id}/logs` with the `query` pairs given.
    pub async fn sandbox_logs(&self, id: &str, query: &[(&str, String)]) -> Result<Vec<LogEntry>> {
        let mut req = self
            .control
            .request(
                Method::Get,
                &format!("/v2/sandboxes/{}/logs", encode_path_segment(id)),
            )
            .operation("logs")
            .sandbox_id(id);
        for (name, value) in query {
            req = req.query(name, value);
        }
        let logs: LogsWire = req.send_json().await?;
        Ok(logs.logs)
    }

    /// `POST /sandboxes/{id}/snapshots`.
    pub async fn create_snapshot(&self, id: &str, name: Option<&str>) -> Result<SnapshotWire> {
        self.control
            .request(Method::Post, &sandbox_path(id, "/snapshots"))
            .json(&SnapshotBody {
                name: name.map(str::to_owned),
            })
            .operation("snapshot")
            .sandbox_id(id)
            .max_body(ONE_OBJECT_MAX_BODY)
            .send_json()
            .await
    }

    /// `GET /snapshots`, page by page, of one sandbox when `sandbox_id` is given.
    pub fn list_snapshots(
        &self,
        sandbox_id: Option<&str>,
    ) -> BoxStream<'static, Result<SnapshotWire>> {
        let api = self.control.clone();
        let sandbox_id = sandbox_id.map(str::to_owned);
        paged(move || {
            let mut req = api
                .request(Method::Get, "/snapshots")
                .operation("list_snapshots");
            if let Some(id) = &sandbox_id {
                req = req.query("sandboxID", id);
            }
            req
        })
    }

    /// `DELETE /templates/{snapshotID}`: how a snapshot is deleted.
    pub async fn delete_snapshot(&self, snapshot_id: &str) -> Result<()> {
        self.control
            .request(
                Method::Delete,
                &format!("/templates/{}", encode_path_segment(snapshot_id)),
            )
            .operation("delete_snapshot")
            .send_empty()
            .await
    }

    /// `POST /volumes`.
    pub async fn create_volume(&self, name: &str) -> Result<Volume> {
        self.control
            .request(Method::Post, "/volumes")
            .json(&NewVolume { name: name.into() })
            .operation("create_volume")
            .max_body(ONE_OBJECT_MAX_BODY)
            .send_json()
            .await
    }

    /// `GET /volumes`.
    pub async fn list_volumes(&self) -> Result<Vec<Volume>> {
        self.control
            .request(Method::Get, "/volumes")
            .operation("list_volumes")
            .send_json()
            .await
    }

    /// `DELETE /volumes/{volumeID}`.
    pub async fn delete_volume(&self, volume_id: &str) -> Result<()> {
        self.control
            .request(
                Method::Delete,
                &format!("/volumes/{}", encode_path_segment(volume_id)),
            )
            .operation("delete_volume")
            .send_empty()
            .await
    }

    /// `GET /templates/aliases/{alias}`.
    pub async fn template_alias(&self, alias: &str) -> Result<TemplateAlias> {
        self.control
            .request(
                Method::Get,
                &format!("/templates/aliases/{}", encode_path_segment(alias)),
            )
            .operation("prepare")
            .max_body(ONE_OBJECT_MAX_BODY)
            .send_json()
            .await
    }

    /// `GET /templates/{templateID}`, with its builds.
    pub async fn template(&self, template_id: &str) -> Result<TemplateWithBuilds> {
        self.control
            .request(
                Method::Get,
                &format!("/templates/{}", encode_path_segment(template_id)),
            )
            .operation("prepare")
            .max_body(ONE_OBJECT_MAX_BODY)
            .send_json()
            .await
    }

    /// `POST /v3/templates`: a new template, or a new build of the one with that name.
    pub async fn create_template(&self, body: &TemplateCreate) -> Result<TemplateCreated> {
        self.control
            .request(Method::Post, "/v3/templates")
            .json(body)
            .operation("prepare")
            .max_body(ONE_OBJECT_MAX_BODY)
            .send_json()
            .await
    }

    /// `POST /v2/templates/{templateID}/builds/{buildID}`: starts the build.
    pub async fn start_build(
        &self,
        template_id: &str,
        build_id: &str,
        body: &TemplateBuildStart,
    ) -> Result<()> {
        let tid = encode_path_segment(template_id);
        let bid = encode_path_segment(build_id);
        self.control
            .request(Method::Post, &format!("/v2/templates/{tid}/builds/{bid}"))
            .json(body)
            .operation("prepare")
            .send_empty()
            .await
    }

    /// `GET /templates/{templateID}/builds/{buildID}/status?logsOffset=0&limit=0`.
    pub async fn build_status(
        &self,
        template_id: &str,
        build_id: &str,
    ) -> Result<TemplateBuildStatus> {
        let tid = encode_path_segment(template_id);
        let bid = encode_path_segment(build_id);
        self.control
            .request(
                Method::Get,
                &format!("/templates/{tid}/builds/{bid}/status"),
            )
            .query("logsOffset", 0)
            .query("limit", 0)
            .operation("prepare")
            .max_body(ONE_OBJECT_MAX_BODY)
            .send_json()
            .await
    }
}

/// A stream over E2B's `X-Next-Token` pagination (PROTOCOL.md §2.3): each page is fetched as
/// the stream is polled, with `nextToken` added to the request `request` builds; it ends when
/// the service sends no token, or the same one again.
fn paged<T>(request: impl Fn() -> Request + Send + Sync + 'static) -> BoxStream<'static, Result<T>>
where
    T: serde::de::DeserializeOwned + Send + 'static,
{
    let request = std::sync::Arc::new(request);
    sandbox_sdk_core::paging::pages(move |token: Option<String>| {
        let request = request.clone();
        async move {
            let mut req = request();
            if let Some(t) = &token {
                req = req.query("nextToken", t);
            }
            let response = req.send().await?;
            let next = response
                .header("x-next-token")
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
            let page: Vec<T> = response.json().await?;
            Ok((page, next))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_query_is_form_encoded() {
        let m: BTreeMap<String, String> = [
            ("a b".to_string(), "x&y".to_string()),
            ("k".into(), "v".into()),
        ]
        .into();
        assert_eq!(metadata_query(&m), "a+b=x%26y&k=v");
    }
}
