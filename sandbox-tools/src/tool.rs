//! The generic shape of a tool, enough for an MCP server or an agent loop to list and call any
//! of them without knowing which it is: a [`ToolSpec`] (name, description, input JSON Schema,
//! annotations) and `async fn call(&self, input: serde_json::Value) -> ToolResult`.

use crate::result::{ToolError, ToolResult};
use crate::session::Session;
use async_trait::async_trait;
use futures::FutureExt;
use futures::future::BoxFuture;
use sandbox_sdk_core::Capability;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Hints about what a tool does, as MCP's tool annotations carry them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Annotations {
    /// The tool changes nothing (MCP `readOnlyHint`). Only these are offered in read-only mode.
    pub read_only: bool,
    /// The tool may destroy or overwrite data (MCP `destructiveHint`).
    pub destructive: bool,
    /// Calling it again with the same input has no further effect (MCP `idempotentHint`).
    pub idempotent: bool,
    /// The tool reaches beyond one sandbox's files and processes, for example a provider's
    /// account (MCP `openWorldHint`).
    pub open_world: bool,
}

impl Annotations {
    /// Reads only.
    pub const READ_ONLY: Annotations = Annotations {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    };

    /// Changes things, may destroy or overwrite data, not idempotent.
    pub const DESTRUCTIVE: Annotations = Annotations {
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: false,
    };

    /// Only adds, and doing it twice is doing it once.
    pub const ADDITIVE_IDEMPOTENT: Annotations = Annotations {
        read_only: false,
        destructive: false,
        idempotent: true,
        open_world: false,
    };
}

/// Which group of tools a tool belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// The `sandbox_*_v1` tools.
    Standard,
    /// Anthropic's `bash` and `str_replace_based_edit_tool` shapes.
    Anthropic,
    /// OpenAI's `shell` and `apply_patch` shapes.
    #[serde(rename = "openai")]
    OpenAi,
}

/// Everything about a tool except how to run it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// A stable name; the `sandbox_*` tools end in their contract's version (`_v1`).
    pub name: String,
    /// A short human title.
    pub title: String,
    /// What the tool does and how to use it, written for a model.
    pub description: String,
    /// JSON Schema of the input object.
    pub input_schema: Value,
    /// What the tool does to the world.
    pub annotations: Annotations,
    /// The group it belongs to.
    pub family: Family,
    /// The capabilities it needs (each native or emulated) to be offered at all.
    pub requires: Vec<Capability>,
    /// Whether it needs a provider (not only a sandbox) to be offered.
    pub needs_provider: bool,
    /// The definition to send a model vendor's API instead of a generic function tool, for the
    /// vendors' own tool shapes (for example `{"type": "bash_20250124", "name": "bash"}`).
    pub native_definition: Option<Value>,
}

impl ToolSpec {
    /// The spec as MCP's `tools/list` lists a tool: `name`, `title`, `description`,
    /// `inputSchema` and `annotations` (`readOnlyHint`, `destructiveHint`, `idempotentHint`,
    /// `openWorldHint`).
    pub fn to_mcp(&self) -> Value {
        json!({
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": {
                "title": self.title,
                "readOnlyHint": self.annotations.read_only,
                "destructiveHint": self.annotations.destructive,
                "idempotentHint": self.annotations.idempotent,
                "openWorldHint": self.annotations.open_world,
            },
        })
    }

    /// The spec as a tool of Anthropic's Messages API: the native definition when there is one,
    /// else `{name, description, input_schema}`.
    pub fn to_anthropic(&self) -> Value {
        if self.family == Family::Anthropic
            && let Some(native) = &self.native_definition
        {
            return native.clone();
        }
        json!({
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        })
    }

    /// The spec as a tool of OpenAI's Responses API: the native definition when there is one,
    /// else `{"type": "function", name, description, parameters}`.
    pub fn to_openai(&self) -> Value {
        if self.family == Family::OpenAi
            && let Some(native) = &self.native_definition
        {
            return native.clone();
        }
        json!({
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.input_schema,
        })
    }
}

/// One tool: a spec and a call. Object-safe, so a tool set is a list of `Arc<dyn Tool>`.
#[async_trait]
pub trait Tool: Send + Sync + fmt::Debug {
    /// The tool's name, description, schema and annotations.
    fn spec(&self) -> &ToolSpec;

    /// Runs the tool. Never panics and never fails at the protocol level: bad input, provider
    /// errors, timeouts and even a panic inside the tool come back as a result with `is_error`.
    async fn call(&self, input: Value) -> ToolResult;
}

/// The JSON Schema of `T`, as tool input schemas are written: draft 2020-12 with every
/// subschema inlined (no `$ref`, which some model APIs do not follow), without the Rust type's
/// own title and description (the tool has its own), and without the non-standard numeric
/// `format`s (`int64`, `double`, ...) schemars adds.
pub fn schema_for<T: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let schema = generator.into_root_schema_for::<T>();
    let mut value = serde_json::to_value(schema).unwrap_or_else(|_| json!({"type": "object"}));
    if let Some(map) = value.as_object_mut() {
        map.remove("$schema");
        map.remove("title");
        map.remove("description");
    }
    strip_numeric_formats(&mut value);
    value
}

fn strip_numeric_formats(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let numeric = map.get("format").and_then(Value::as_str).is_some_and(|f| {
                matches!(
                    f,
                    "int8"
                        | "int16"
                        | "int32"
                        | "int64"
                        | "uint"
                        | "uint8"
                        | "uint16"
                        | "uint32"
                        | "uint64"
                        | "float"
                        | "double"
                )
            });
            if numeric {
                map.remove("format");
            }
            map.values_mut().for_each(strip_numeric_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_numeric_formats),
        _ => {}
    }
}

pub(crate) type Handler<I> =
    fn(Arc<Session>, I) -> BoxFuture<'static, Result<ToolResult, ToolError>>;
pub(crate) type TimeoutOf<I> = fn(&I, &Session) -> Duration;

/// A tool built from a typed input and an async handler; every call is parsed, bounded by a
/// timeout, guarded against panics and redacted.
pub(crate) struct TypedTool<I> {
    pub spec: ToolSpec,
    pub session: Arc<Session>,
    pub handler: Handler<I>,
    pub timeout_of: TimeoutOf<I>,
}

impl<I> fmt::Debug for TypedTool<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.spec.name)
            .finish()
    }
}

#[async_trait]
impl<I> Tool for TypedTool<I>
where
    I: DeserializeOwned + Send + 'static,
{
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, input: Value) -> ToolResult {
        let input = if input.is_null() { json!({}) } else { input };
        let result = match serde_json::from_value::<I>(input) {
            Err(e) => Err(ToolError::invalid_input(
                format!("the input does not fit {}: {e}", self.spec.name),
                "call again with an input that matches the tool's input schema",
            )),
            Ok(input) => {
                let limit = (self.timeout_of)(&input, &self.session);
                let run = std::panic::AssertUnwindSafe((self.handler)(self.session.clone(), input))
                    .catch_unwind();
                match tokio::time::timeout(limit, run).await {
                    Ok(Ok(result)) => result,
                    Ok(Err(_panic)) => Err(ToolError::new(
                        "internal",
                        format!("{} failed unexpectedly", self.spec.name),
                        "this is a bug in the tool; try another way, and tell the user",
                    )),
                    Err(_) => Err(ToolError::new(
                        "timeout",
                        format!(
                            "{} did not finish within {}s and was abandoned",
                            self.spec.name,
                            limit.as_secs()
                        ),
                        "try a smaller step, or run long work in the background and poll its output",
                    )),
                }
            }
        };
        let mut result = result.unwrap_or_else(ToolError::into_result);
        self.session.redact(&mut result);
        // Only the name and the outcome: inputs and outputs may hold secrets.
        tracing::debug!(
            tool = %self.spec.name,
            is_error = result.is_error,
            kind = result.error_kind().unwrap_or(""),
            "tool call"
        );
        result
    }
}
