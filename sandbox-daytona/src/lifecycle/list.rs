//! Listing sandboxes (`GET /sandbox`, PROTOCOL.md §2): pages over both answer shapes, and the
//! look-up of a create's idempotency key by its label.

use super::state::{info_from_dto, raw_states_of};
use crate::api::client::Api;
use crate::config::IDEMPOTENCY_LABEL;
use crate::wire::SandboxList;
use futures::TryStreamExt;
use sandbox_sdk_core::{ListFilter, Result, SandboxInfo, SandboxStream};
use std::sync::Arc;

/// The sandboxes `filter` selects, page by page (100 a page) over the cursor page of newer
/// APIs and the bare array of older ones; a cursor that does not move ends the listing.
pub(crate) fn list(api: Arc<Api>, filter: &ListFilter) -> SandboxStream<'static> {
    let filter = filter.clone();
    sandbox_sdk_core::paging::pages(move |cursor: Option<String>| {
        let api = api.clone();
        let filter = filter.clone();
        async move {
            let labels = (!filter.metadata.is_empty())
                .then(|| serde_json::to_string(&filter.metadata).unwrap_or_default());
            let states: Vec<&str> = filter
                .states
                .iter()
                .flat_map(|state| raw_states_of(*state))
                .collect();
            let page = api
                .list_sandboxes(cursor.as_deref(), 100, labels.as_deref(), &states, "list")
                .await?;
            let (items, next) = match page {
                SandboxList::Page { items, next_cursor } => (items, next_cursor),
                SandboxList::Array(items) => (items, None),
            };
            let infos: Vec<SandboxInfo> = items
                .iter()
                .map(info_from_dto)
                .filter(|info| filter.matches(info))
                .collect();
            Ok((infos, next))
        }
    })
}

/// Lists by the [`IDEMPOTENCY_LABEL`] label (`GET /sandbox?labels=…`) and returns the first
/// sandbox that is not being destroyed.
pub(crate) async fn find_by_idempotency_key(
    api: Arc<Api>,
    key: &str,
) -> Result<Option<SandboxInfo>> {
    let filter = ListFilter::new().metadata(IDEMPOTENCY_LABEL, key);
    let mut found = list(api, &filter);
    while let Some(info) = found.try_next().await? {
        let going = matches!(info.raw_state.as_deref(), Some("destroying" | "destroyed"));
        if !going {
            return Ok(Some(info));
        }
    }
    Ok(None)
}
