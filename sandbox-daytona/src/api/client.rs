//! [`Api`]: the control plane (`{api_url}/…`, PROTOCOL.md §1, §2), one function per endpoint.

use crate::config::{Config, PROVIDER, SMALL_ANSWER, SOURCE};
use crate::error::map_error;
use crate::wire::{
    CreateSandboxBody, CreateSnapshotBody, Labels, PreviewUrlDto, PublicConfigDto, SandboxDto,
    SandboxList, SnapshotDto, SshAccessDto, UsageDto, UsagePeriodDto,
};
use sandbox_sdk_core::Result;
use sandbox_sdk_core::http::{HttpClient, Method, Request, Response, encode_path_segment};
use std::collections::BTreeMap;
use std::time::SystemTime;

/// The control-plane client and the settings every request uses. Shared (`Arc`) by the
/// provider and every sandbox handle it makes.
pub(crate) struct Api {
    pub config: Config,
    pub http: HttpClient,
    /// The bearer credential, for the WebSocket upgrade (which does not go through `http`).
    pub secret: String,
}

/// One lifecycle call on a sandbox (`{method} /sandbox/{id}{suffix}`).
pub(crate) struct SandboxCall<'a> {
    pub operation: &'a str,
    pub method: Method,
    pub suffix: &'a str,
    pub query: &'a [(&'a str, String)],
    pub body: Option<&'a serde_json::Value>,
}

impl<'a> SandboxCall<'a> {
    /// A call without query or body.
    pub fn new(operation: &'a str, method: Method, suffix: &'a str) -> Self {
        SandboxCall {
            operation,
            method,
            suffix,
            query: &[],
            body: None,
        }
    }
}

impl Api {
    /// The client for `config`, sending `secret` as the bearer credential with the SDK's
    /// headers (PROTOCOL.md §1): `X-Daytona-Source`, `X-Daytona-SDK-Version`, a matching
    /// `User-Agent`, and with a JWT the organization id.
    pub fn new(config: Config, secret: String) -> Result<Api> {
        let mut http = HttpClient::builder(PROVIDER, config.api_url.trim_end_matches('/'))
            .bearer(secret.clone())
            .header("X-Daytona-Source", SOURCE)
            .header("X-Daytona-SDK-Version", &config.sdk_version)
            .user_agent(&format!("{SOURCE}/{}", config.sdk_version))
            .timeout(config.request_timeout)
            .error_mapper(map_error);
        if !config.api_key
            && let Some(org) = &config.organization_id
        {
            http = http.header("X-Daytona-Organization-ID", org);
        }
        let http = http.build()?;
        if let Some(url) = &config.toolbox_url {
            http.with_base_url(url.trim_end_matches('/'))?;
        }
        Ok(Api {
            config,
            http,
            secret,
        })
    }

    fn sandbox_path(id: &str) -> String {
        format!("/sandbox/{}", encode_path_segment(id))
    }

    /// A request to `suffix` below a sandbox's path, for `operation`.
    fn sandbox_request(&self, method: Method, id: &str, suffix: &str, operation: &str) -> Request {
        self.http
            .request(method, &format!("{}{suffix}", Self::sandbox_path(id)))
            .operation(operation)
            .sandbox_id(id)
    }

    /// `GET /sandbox/{idOrName}`.
    pub async fn get_sandbox(&self, id: &str, operation: &str) -> Result<SandboxDto> {
        self.sandbox_request(Method::Get, id, "", operation)
            .send_json()
            .await
    }

    /// `POST /sandbox`.
    pub async fn create_sandbox(&self, body: &CreateSandboxBody) -> Result<SandboxDto> {
        self.http
            .request(Method::Post, "/sandbox")
            .json(body)
            .operation("create")
            .send_json()
            .await
    }

    /// `GET /sandbox`: one page (`labels` a JSON object, `states` raw state names).
    pub async fn list_sandboxes(
        &self,
        cursor: Option<&str>,
        limit: u32,
        labels: Option<&str>,
        states: &[&str],
        operation: &str,
    ) -> Result<SandboxList> {
        let mut request = self
            .http
            .request(Method::Get, "/sandbox")
            .query("limit", limit)
            .operation(operation);
        if let Some(c) = cursor {
            request = request.query("cursor", c);
        }
        if let Some(labels) = labels {
            request = request.query("labels", labels);
        }
        for state in states {
            request = request.query("states", state);
        }
        request.send_json().await
    }

    /// A lifecycle call (`POST /sandbox/{id}/start`, `/stop`, …, `DELETE /sandbox/{id}`),
    /// answered whole.
    pub async fn sandbox_call(&self, id: &str, call: &SandboxCall<'_>) -> Result<Response> {
        let mut request = self.sandbox_request(call.method, id, call.suffix, call.operation);
        for (k, v) in call.query {
            request = request.query(k, v);
        }
        if let Some(body) = call.body {
            request = request.json(body);
        }
        request.send().await
    }

    /// `PUT /sandbox/{id}/labels`: replaces every label.
    pub async fn set_labels(
        &self,
        id: &str,
        labels: BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>> {
        let answer: Labels = self
            .sandbox_request(Method::Put, id, "/labels", "set_labels")
            .json(&Labels { labels })
            .send_json()
            .await?;
        Ok(answer.labels)
    }

    /// `GET /sandbox/{id}/toolbox-proxy-url`: the toolbox root of older APIs (PROTOCOL.md §2).
    pub async fn toolbox_proxy_url(&self, id: &str) -> Result<String> {
        #[derive(serde::Deserialize)]
        struct Url {
            url: String,
        }
        let answer: Url = self
            .sandbox_request(Method::Get, id, "/toolbox-proxy-url", "connect")
            .max_body(SMALL_ANSWER)
            .send_json()
            .await?;
        Ok(answer.url)
    }

    /// `POST /sandbox/{id}/ssh-access?expiresInMinutes=` (PROTOCOL.md §10).
    pub async fn mint_ssh_access(&self, id: &str, minutes: u64) -> Result<SshAccessDto> {
        self.sandbox_request(Method::Post, id, "/ssh-access", "ssh_access")
            .query("expiresInMinutes", minutes)
            .send_json()
            .await
    }

    /// `GET /sandbox/{id}/ports/{port}/preview-url` (PROTOCOL.md §11).
    pub async fn preview_url(&self, id: &str, port: u16) -> Result<PreviewUrlDto> {
        self.sandbox_request(
            Method::Get,
            id,
            &format!("/ports/{port}/preview-url"),
            "preview_link",
        )
        .send_json()
        .await
    }

    /// `GET /sandbox/{id}/ports/{port}/signed-preview-url?expiresInSeconds=`.
    pub async fn signed_preview_url(
        &self,
        id: &str,
        port: u16,
        secs: u64,
    ) -> Result<PreviewUrlDto> {
        self.sandbox_request(
            Method::Get,
            id,
            &format!("/ports/{port}/signed-preview-url"),
            "preview_link",
        )
        .query("expiresInSeconds", secs)
        .send_json()
        .await
    }

    /// `POST /sandbox/{id}/ports/{port}/signed-preview-url/{token}/expire`. The token travels
    /// in the path (the API has no other form), so it is scrubbed from any error.
    pub async fn expire_signed_preview_url(&self, id: &str, port: u16, token: &str) -> Result<()> {
        let segment = encode_path_segment(token);
        self.sandbox_request(
            Method::Post,
            id,
            &format!("/ports/{port}/signed-preview-url/{segment}/expire"),
            "preview_link",
        )
        .path_secret(token)
        .send_empty()
        .await
    }

    /// `GET {url}` on a preview link with its headers (token headers kept out of logs).
    pub async fn fetch_preview(
        &self,
        id: &str,
        url: &str,
        headers: &BTreeMap<String, String>,
    ) -> Result<Response> {
        let mut request = self
            .http
            .request_url(Method::Get, url)
            .without_auth()
            .operation("fetch_preview")
            .sandbox_id(id);
        for (name, value) in headers {
            request = if name.to_ascii_lowercase().contains("token") {
                request.sensitive_header(name, value)
            } else {
                request.header(name, value)
            };
        }
        request.send().await
    }

    fn snapshot_path(id_or_name: &str) -> String {
        format!("/snapshots/{}", encode_path_segment(id_or_name))
    }

    /// `GET /snapshots/{idOrName}` (PROTOCOL.md §4).
    pub async fn get_snapshot(&self, name: &str) -> Result<SnapshotDto> {
        self.http
            .request(Method::Get, &Self::snapshot_path(name))
            .operation("prepare")
            .send_json()
            .await
    }

    /// `POST /snapshots`.
    pub async fn create_snapshot(&self, body: &CreateSnapshotBody) -> Result<SnapshotDto> {
        self.http
            .request(Method::Post, "/snapshots")
            .json(body)
            .operation("prepare")
            .send_json()
            .await
    }

    /// `DELETE /snapshots/{id}`.
    pub async fn delete_snapshot(&self, id: &str) -> Result<()> {
        self.http
            .request(Method::Delete, &Self::snapshot_path(id))
            .operation("prepare")
            .send_empty()
            .await
    }

    /// `POST /snapshots/{id}/activate`.
    pub async fn activate_snapshot(&self, id: &str) -> Result<()> {
        self.http
            .request(
                Method::Post,
                &format!("{}/activate", Self::snapshot_path(id)),
            )
            .operation("prepare")
            .send_empty()
            .await
    }

    /// `GET /organizations/{orgId}/usage`.
    pub async fn organization_usage(&self, org: &str) -> Result<UsageDto> {
        self.http
            .request(
                Method::Get,
                &format!("/organizations/{}/usage", encode_path_segment(org)),
            )
            .operation("limits")
            .send_json()
            .await
    }

    /// `GET /config`: the installation's public settings.
    pub async fn public_config(&self) -> Result<PublicConfigDto> {
        self.http
            .request(Method::Get, "/config")
            .operation("usage")
            .send_json()
            .await
    }

    /// An address from an answer that the key may be sent to: only an https one (or http when
    /// the API is), with no user info, query or fragment.
    pub fn checked_url(&self, url: &str, operation: &str, sandbox_id: &str) -> Result<String> {
        sandbox_sdk_core::http::checked_answer_url(url, &self.config.api_url)
            .map_err(|e| e.or_context(PROVIDER, operation, Some(sandbox_id)))
    }

    /// `GET {analytics}/organization/{orgId}/sandbox/{sandboxId}/usage?from=&to=`, at an
    /// `analytics` address that passed [`Api::checked_url`].
    pub async fn analytics_usage(
        &self,
        analytics: &str,
        org: &str,
        sandbox_id: &str,
        from: SystemTime,
        to: SystemTime,
    ) -> Result<Vec<UsagePeriodDto>> {
        self.http
            .with_base_url(analytics.trim_end_matches('/'))?
            .request(
                Method::Get,
                &format!(
                    "/organization/{}/sandbox/{}/usage",
                    encode_path_segment(org),
                    encode_path_segment(sandbox_id)
                ),
            )
            .query("from", sandbox_sdk_core::time::format_rfc3339(from))
            .query("to", sandbox_sdk_core::time::format_rfc3339(to))
            .operation("usage")
            .sandbox_id(sandbox_id)
            .send_json()
            .await
    }
}
