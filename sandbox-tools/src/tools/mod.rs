//! Every tool the crate offers, as a catalogue of definitions the set builder filters by
//! family, capabilities, provider presence and read-only mode.

mod code;
mod commands;
mod compat;
mod editor;
mod files;
mod patch;
mod preview;
mod sandboxes;

use crate::result::ToolResult;
use crate::session::Session;
use crate::tool::{Annotations, Family, Handler, TimeoutOf, Tool, ToolSpec, TypedTool, schema_for};
use sandbox_sdk_core::Capability;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Arc;

/// The definition of one tool, before it is bound to a session.
pub(crate) struct Def {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub annotations: Annotations,
    pub family: Family,
    pub requires: &'static [Capability],
    pub needs_provider: bool,
    pub native: Option<fn() -> Value>,
    pub build: fn(&Def, Arc<Session>) -> Arc<dyn Tool>,
}

impl Def {
    pub fn spec<I: JsonSchema>(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.to_owned(),
            title: self.title.to_owned(),
            description: self.description.to_owned(),
            input_schema: schema_for::<I>(),
            annotations: self.annotations,
            family: self.family,
            requires: self.requires.to_vec(),
            needs_provider: self.needs_provider,
            native_definition: self.native.map(|f| f()),
        }
    }
}

/// Binds a typed handler to a session as a tool.
pub(crate) fn make<I>(
    def: &Def,
    session: Arc<Session>,
    handler: Handler<I>,
    timeout_of: TimeoutOf<I>,
) -> Arc<dyn Tool>
where
    I: JsonSchema + DeserializeOwned + Send + 'static,
{
    Arc::new(TypedTool {
        spec: def.spec::<I>(),
        session,
        handler,
        timeout_of,
    })
}

/// The plain call timeout.
pub(crate) fn call_timeout<I>(_: &I, session: &Session) -> std::time::Duration {
    session.config.call_timeout
}

/// Every tool definition, in listing order.
pub(crate) fn catalogue() -> Vec<Def> {
    let mut all = Vec::new();
    all.extend(sandboxes::defs());
    all.extend(commands::defs());
    all.extend(code::defs());
    all.extend(files::defs());
    all.extend(editor::defs());
    all.extend(patch::defs());
    all.extend(preview::defs());
    all.extend(compat::defs());
    all
}

/// A success whose structured form is `value` and whose text is `text`.
pub(crate) fn ok(text: impl Into<String>, value: Value) -> ToolResult {
    ToolResult::ok(text, value)
}
