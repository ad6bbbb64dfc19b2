//! [`ToolSet`]: the tools for one provider and/or sandbox, filtered by what they can do.

use crate::config::ToolConfig;
use crate::result::{ToolError, ToolResult};
use crate::session::{Session, lock};
use crate::tool::{Annotations, Family, Tool, ToolSpec};
use crate::tools::catalogue;
use sandbox_sdk_core::{Capabilities, Capability, Error, Provider, Sandbox};
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

/// A catalogue entry: what a tool needs to be offered, without building it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolInfo {
    /// The tool's name.
    pub name: &'static str,
    /// Its group.
    pub family: Family,
    /// The capabilities it needs (each native or emulated).
    pub requires: &'static [Capability],
    /// Whether it needs a provider.
    pub needs_provider: bool,
    /// Its annotations.
    pub annotations: Annotations,
}

/// Every tool this crate can offer, whether or not a given set offers it.
pub fn catalogue_info() -> Vec<ToolInfo> {
    catalogue()
        .into_iter()
        .map(|d| ToolInfo {
            name: d.name,
            family: d.family,
            requires: d.requires,
            needs_provider: d.needs_provider,
            annotations: d.annotations,
        })
        .collect()
}

/// Builds a [`ToolSet`]; see [`ToolSet::builder`].
#[derive(Default)]
pub struct ToolSetBuilder {
    provider: Option<Arc<dyn Provider>>,
    sandbox: Option<Arc<dyn Sandbox>>,
    config: ToolConfig,
    standard: Option<bool>,
    anthropic: bool,
    openai: bool,
}

impl fmt::Debug for ToolSetBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSetBuilder")
            .field(
                "provider",
                &self.provider.as_ref().map(|p| p.name().to_owned()),
            )
            .field("sandbox", &self.sandbox.as_ref().map(|s| s.id().to_owned()))
            .field("config", &self.config)
            .finish()
    }
}

impl ToolSetBuilder {
    /// The provider: enables the sandbox lifecycle tools (create, list, connect, destroy) and
    /// lets calls name any of our sandboxes by id.
    pub fn provider(mut self, provider: Arc<dyn Provider>) -> Self {
        self.provider = Some(provider);
        self
    }

    /// The sandbox calls go to until the model creates or connects to another.
    pub fn sandbox(mut self, sandbox: Arc<dyn Sandbox>) -> Self {
        self.sandbox = Some(sandbox);
        self
    }

    /// The settings (limits, timeouts, paths, read-only mode, secrets).
    pub fn config(mut self, config: ToolConfig) -> Self {
        self.config = config;
        self
    }

    /// Offer the `sandbox_*_v1` tools (default: yes).
    pub fn standard(mut self, on: bool) -> Self {
        self.standard = Some(on);
        self
    }

    /// Offer Anthropic's `bash` and `str_replace_based_edit_tool` shapes (default: no).
    pub fn anthropic(mut self, on: bool) -> Self {
        self.anthropic = on;
        self
    }

    /// Offer OpenAI's `shell` and `apply_patch` shapes (default: no).
    pub fn openai(mut self, on: bool) -> Self {
        self.openai = on;
        self
    }

    /// Builds the set. Fails with `Validation` when given neither a provider nor a sandbox.
    ///
    /// A tool is offered when its family is on, its provider need is met, every capability it
    /// requires is native or emulated, and, in read-only mode, it is annotated read-only. The
    /// capability map is the provider's for the lifecycle tools, and for the others the
    /// sandbox's when a sandbox is given (it reflects any emulation), else the provider's.
    pub fn build(self) -> Result<ToolSet, Error> {
        let capabilities = match (&self.sandbox, &self.provider) {
            (Some(sandbox), _) => sandbox.capabilities(),
            (None, Some(provider)) => provider.capabilities(),
            (None, None) => {
                return Err(Error::validation(
                    "a tool set needs a provider, a sandbox, or both",
                ));
            }
        };
        // The lifecycle tools act through the provider, so its own map decides them.
        let provider_capabilities = self.provider.as_ref().map(|p| p.capabilities());
        let standard = self.standard.unwrap_or(true);
        let read_only = self.config.read_only;
        let has_provider = self.provider.is_some();
        let session = Arc::new(Session {
            provider: self.provider,
            bound: self.sandbox.clone(),
            current: Mutex::new(self.sandbox.clone()),
            known: Mutex::new(HashMap::new()),
            background: Mutex::new(HashMap::new()),
            bash_cwd: Mutex::new(HashMap::new()),
            config: self.config,
            capabilities,
        });
        let tools = catalogue()
            .into_iter()
            .filter(|d| match d.family {
                Family::Standard => standard,
                Family::Anthropic => self.anthropic,
                Family::OpenAi => self.openai,
            })
            .filter(|d| has_provider || !d.needs_provider)
            .filter(|d| {
                let map = match (d.needs_provider, &provider_capabilities) {
                    (true, Some(provider)) => provider,
                    _ => &capabilities,
                };
                d.requires.iter().all(|c| map.level(*c).is_available())
            })
            .filter(|d| !read_only || d.annotations.read_only)
            .map(|d| (d.build)(&d, session.clone()))
            .collect();
        Ok(ToolSet { tools, session })
    }
}

/// The tools for one provider and/or sandbox: list them, look them up, call them by name.
///
/// Each tool is offered only where the capability map allows it, and every call is bounded by
/// a timeout, capped in output, redacted of known secrets, and turns every failure into an
/// error result (see [`ToolResult`]). Cloning shares the tools and their state.
#[derive(Clone)]
pub struct ToolSet {
    tools: Vec<Arc<dyn Tool>>,
    session: Arc<Session>,
}

impl fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolSet")
            .field("tools", &self.names())
            .finish()
    }
}

impl ToolSet {
    /// A builder with the default configuration and the standard tools.
    pub fn builder() -> ToolSetBuilder {
        ToolSetBuilder::default()
    }

    /// The standard tools for one sandbox, with the default configuration.
    pub fn for_sandbox(sandbox: Arc<dyn Sandbox>) -> Result<ToolSet, Error> {
        ToolSet::builder().sandbox(sandbox).build()
    }

    /// The standard tools for a provider (the model creates or connects to sandboxes), with the
    /// default configuration.
    pub fn for_provider(provider: Arc<dyn Provider>) -> Result<ToolSet, Error> {
        ToolSet::builder().provider(provider).build()
    }

    /// The tools, in listing order.
    pub fn tools(&self) -> &[Arc<dyn Tool>] {
        &self.tools
    }

    /// The tools' specs, in listing order.
    pub fn specs(&self) -> Vec<&ToolSpec> {
        self.tools.iter().map(|t| t.spec()).collect()
    }

    /// The tools' names, in listing order.
    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|t| t.spec().name.as_str()).collect()
    }

    /// A tool by name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.spec().name == name)
    }

    /// Calls a tool by name. An unknown name is an error result naming the tools there are.
    pub async fn call(&self, name: &str, input: Value) -> ToolResult {
        match self.get(name) {
            Some(tool) => tool.call(input).await,
            None => ToolError::new(
                "unknown_tool",
                format!("there is no tool named {name:?} here"),
                format!("use one of: {}", self.names().join(", ")),
            )
            .into_result(),
        }
    }

    /// The sandbox calls go to when they name none.
    pub fn current_sandbox(&self) -> Option<Arc<dyn Sandbox>> {
        lock(&self.session.current).clone()
    }

    /// The capability map the sandbox tools were filtered by (the sandbox's when the set was
    /// built with one, else the provider's).
    pub fn capabilities(&self) -> Capabilities {
        self.session.capabilities
    }

    /// The settings.
    pub fn config(&self) -> &ToolConfig {
        &self.session.config
    }
}
