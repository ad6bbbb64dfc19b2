//! Sandbox lifecycle tools: create (idempotent by key), list ours, connect, destroy.

use super::{Def, call_timeout, make, ok};
use crate::result::{ToolError, ToolResult};
use crate::session::Session;
use crate::tool::{Annotations, Family};
use futures::TryStreamExt;
use sandbox_sdk_core::{Capability, CreateSpec, ListFilter, SandboxInfo};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub(super) fn defs() -> Vec<Def> {
    vec![
        Def {
            name: "sandbox_create_v1",
            title: "Create a sandbox",
            description: "Create a new sandbox (a throwaway Linux machine) and make it the current one, so the other tools use it when no sandbox_id is given. idempotency_key is required: pick a short key naming this task (for example \"fix-issue-42\"); calling again with the same key returns the same sandbox instead of making a second one, so a retry after a timeout is safe. Returns the sandbox id.",
            annotations: Annotations {
                read_only: false,
                destructive: false,
                idempotent: true,
                open_world: true,
            },
            family: Family::Standard,
            requires: &[],
            needs_provider: true,
            native: None,
            build: |def, s| {
                make::<CreateInput>(
                    def,
                    s,
                    |s, i| Box::pin(create(s, i)),
                    |_, s| s.config.create_timeout,
                )
            },
        },
        Def {
            name: "sandbox_list_v1",
            title: "List our sandboxes",
            description: "List the sandboxes these tools created (id, state, creation time, labels). Use it to find a sandbox to connect to after losing track of its id.",
            annotations: Annotations {
                open_world: true,
                ..Annotations::READ_ONLY
            },
            family: Family::Standard,
            requires: &[Capability::List],
            needs_provider: true,
            native: None,
            build: |def, s| make::<ListInput>(def, s, |s, i| Box::pin(list(s, i)), call_timeout),
        },
        Def {
            name: "sandbox_connect_v1",
            title: "Connect to a sandbox",
            description: "Connect to an existing sandbox by id (from sandbox_list_v1 or an earlier sandbox_create_v1) and make it the current one, so the other tools use it when no sandbox_id is given. Returns its state.",
            annotations: Annotations {
                open_world: true,
                ..Annotations::READ_ONLY
            },
            family: Family::Standard,
            requires: &[],
            needs_provider: true,
            native: None,
            build: |def, s| {
                make::<ConnectInput>(def, s, |s, i| Box::pin(connect(s, i)), call_timeout)
            },
        },
        Def {
            name: "sandbox_destroy_v1",
            title: "Destroy a sandbox",
            description: "Destroy a sandbox and everything in it, for good: its files and processes are lost. Only sandboxes these tools created can be destroyed. The id must be given explicitly.",
            annotations: Annotations {
                read_only: false,
                destructive: true,
                idempotent: true,
                open_world: true,
            },
            family: Family::Standard,
            requires: &[],
            needs_provider: true,
            native: None,
            build: |def, s| {
                make::<DestroyInput>(def, s, |s, i| Box::pin(destroy(s, i)), call_timeout)
            },
        },
    ]
}

/// Input of `sandbox_create_v1`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateInput {
    /// A short key naming this task; creating again with the same key returns the same sandbox.
    idempotency_key: String,
    /// Template, image or snapshot to start from; omit for the provider's default.
    #[serde(default)]
    template: Option<String>,
    /// Environment variables for every process in the sandbox.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Extra labels to keep with the sandbox.
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// Seconds the sandbox may live before the provider stops it; omit for the provider's default.
    #[serde(default)]
    timeout_secs: Option<u64>,
}

/// Input of `sandbox_list_v1`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListInput {}

/// Input of `sandbox_connect_v1`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConnectInput {
    /// The id of the sandbox.
    sandbox_id: String,
}

/// Input of `sandbox_destroy_v1`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DestroyInput {
    /// The id of the sandbox to destroy.
    sandbox_id: String,
}

fn seconds_since_epoch(t: Option<SystemTime>) -> Value {
    t.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| json!(d.as_secs()))
        .unwrap_or(Value::Null)
}

pub(crate) fn info_json(info: &SandboxInfo) -> Value {
    json!({
        "sandbox_id": info.id,
        "provider": info.provider,
        "state": info.state.as_str(),
        "template": info.template,
        "labels": info.metadata,
        "created_at_unix": seconds_since_epoch(info.created_at),
        "expires_at_unix": seconds_since_epoch(info.expires_at),
    })
}

fn provider(s: &Session) -> Result<&Arc<dyn sandbox_sdk_core::Provider>, ToolError> {
    s.provider.as_ref().ok_or_else(|| {
        ToolError::new(
            "not_supported",
            "these tools were given no provider",
            "work in the current sandbox",
        )
    })
}

async fn create(s: Arc<Session>, input: CreateInput) -> Result<ToolResult, ToolError> {
    let key = input.idempotency_key.trim();
    if key.is_empty() || key.len() > 128 {
        return Err(ToolError::invalid_input(
            "idempotency_key must be 1 to 128 characters",
            "pick a short key naming this task, such as \"fix-issue-42\"",
        ));
    }
    let (label, owner) = s.owner_label();
    if input.labels.contains_key(label) {
        return Err(ToolError::invalid_input(
            format!("the label {label} is set by the tools themselves"),
            "remove it from labels",
        ));
    }
    let mut spec = CreateSpec::new().idempotency_key(format!("{owner}/{key}"));
    spec.template = input.template;
    spec.env = input.env;
    spec.metadata = input.labels;
    spec.metadata.insert(label.to_owned(), owner.to_owned());
    spec.timeout = input.timeout_secs.map(Duration::from_secs);
    let sandbox: Arc<dyn sandbox_sdk_core::Sandbox> = Arc::from(provider(&s)?.create(&spec).await?);
    let info = sandbox.info().await?;
    s.set_current(sandbox);
    Ok(ok(
        format!(
            "sandbox {} ({}) is {} and is now the current sandbox",
            info.id,
            info.provider,
            info.state.as_str()
        ),
        info_json(&info),
    ))
}

async fn list(s: Arc<Session>, _input: ListInput) -> Result<ToolResult, ToolError> {
    let (label, owner) = s.owner_label();
    let filter = ListFilter::new().metadata(label, owner);
    let max = s.config.max_list_entries;
    let mut stream = provider(&s)?.list(&filter);
    let mut found = Vec::new();
    let mut more = false;
    while let Some(info) = stream.try_next().await? {
        if found.len() == max {
            more = true;
            break;
        }
        found.push(info);
    }
    let mut text = if found.is_empty() {
        "no sandboxes created by these tools".to_owned()
    } else {
        found
            .iter()
            .map(|i| format!("{} {}", i.id, i.state.as_str()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if more {
        text.push_str(&format!("\n[only the first {max} are shown]"));
    }
    let items: Vec<Value> = found.iter().map(info_json).collect();
    Ok(ok(text, json!({"sandboxes": items, "truncated": more})))
}

async fn connect(s: Arc<Session>, input: ConnectInput) -> Result<ToolResult, ToolError> {
    let sandbox = s.connect(&input.sandbox_id).await?;
    let info = sandbox.info().await?;
    s.set_current(sandbox);
    Ok(ok(
        format!(
            "connected to sandbox {} ({}); it is {} and is now the current sandbox",
            info.id,
            info.provider,
            info.state.as_str()
        ),
        info_json(&info),
    ))
}

async fn destroy(s: Arc<Session>, input: DestroyInput) -> Result<ToolResult, ToolError> {
    let id = input.sandbox_id;
    let sandbox = s.connect(&id).await?;
    sandbox.destroy().await?;
    s.forget(&id);
    Ok(ok(
        format!("sandbox {id} was destroyed"),
        json!({"sandbox_id": id, "destroyed": true}),
    ))
}
