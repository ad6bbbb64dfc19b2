//! Preview links (PROTOCOL.md §11): the token link, the signed link, and fetching through one.

use crate::api::client::Api;
use crate::config::PROVIDER;
use sandbox_sdk_core::http::Response;
use sandbox_sdk_core::{PreviewLink, Result};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// The header that skips the preview proxy's warning page.
const SKIP_WARNING: &str = "X-Daytona-Skip-Preview-Warning";

/// The preview URL for `port` and the token it needs (sent as `x-daytona-preview-token`; the
/// warning page is skipped). The token changes on every start.
pub(crate) async fn link(api: &Api, id: &str, port: u16) -> Result<PreviewLink> {
    let dto = api.preview_url(id, port).await?;
    let mut headers = BTreeMap::new();
    if let Some(token) = &dto.token {
        headers.insert("x-daytona-preview-token".to_owned(), token.clone());
    }
    headers.insert(SKIP_WARNING.to_owned(), "true".to_owned());
    Ok(PreviewLink {
        url: dto.url,
        port,
        headers,
        token: dto.token,
        expires_at: None,
    })
}

/// A signed preview URL for `port`, valid for `expires_in` (clamped to 1 s – 24 h): no token
/// header needed, survives restarts.
pub(crate) async fn signed_link(
    api: &Api,
    id: &str,
    port: u16,
    expires_in: Duration,
) -> Result<PreviewLink> {
    let secs = expires_in.as_secs().clamp(1, 86_400);
    let dto = api.signed_preview_url(id, port, secs).await?;
    let mut headers = BTreeMap::new();
    headers.insert(SKIP_WARNING.to_owned(), "true".to_owned());
    Ok(PreviewLink {
        url: dto.url,
        port,
        headers,
        token: dto.token,
        expires_at: Some(SystemTime::now() + Duration::from_secs(secs)),
    })
}

/// `GET {link.url}{path}` with the link's headers. `path` must be empty or start with one `/`,
/// and the joined URL must keep the link's scheme, host and port (`Validation` otherwise,
/// before anything is sent).
pub(crate) async fn fetch(api: &Api, id: &str, link: &PreviewLink, path: &str) -> Result<Response> {
    let url = sandbox_sdk_core::http::join_same_origin(&link.url, path)
        .map_err(|e| e.or_context(PROVIDER, "fetch_preview", Some(id)))?;
    api.fetch_preview(id, &url, &link.headers).await
}
