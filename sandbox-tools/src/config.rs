//! Settings of a tool set: limits, timeouts, paths, ownership and secrets.

use crate::path::PathPolicy;
use crate::redact::Redactor;
use sandbox_sdk_core::fleet::Owner;
use std::time::Duration;

/// The metadata label the tool set puts on every sandbox it creates; `sandbox_list_v1` lists
/// only sandboxes carrying it with the set's [`ToolConfig::owner`] as value.
pub const OWNER_LABEL: &str = "sandbox_tools_owner";

/// Settings of a tool set. Start from `ToolConfig::default()` and change fields:
///
/// ```
/// use sandbox_tools::ToolConfig;
/// use std::time::Duration;
///
/// let config = ToolConfig {
///     read_only: true,
///     max_output_bytes: 4096,
///     call_timeout: Duration::from_secs(30),
///     ..ToolConfig::default()
/// };
/// assert!(config.read_only);
/// ```
#[derive(Debug, Clone)]
pub struct ToolConfig {
    /// Offer only tools that change nothing (annotated `read_only`).
    pub read_only: bool,
    /// The most bytes of one output stream (stdout, stderr, a file view) returned by one call;
    /// longer output keeps its head and tail and states what was cut. Default 16 KiB.
    pub max_output_bytes: usize,
    /// The most images one result carries (the plots and pictures a code cell displayed);
    /// the rest are named in the text as left out. Default 4.
    pub max_images: usize,
    /// The most image bytes (decoded) one result carries in all; an image that would go over
    /// is left out and named in the text. Default 4 MiB.
    pub max_image_bytes: usize,
    /// The largest file the read, view, editor and patch tools load. Default 8 MiB.
    pub max_file_bytes: u64,
    /// The most entries a listing returns. Default 500.
    pub max_list_entries: usize,
    /// The longest any call may take (commands and creates have their own limits). Default 120 s.
    pub call_timeout: Duration,
    /// How long a command may run when the model names no timeout. Default 60 s.
    pub default_command_timeout: Duration,
    /// The longest timeout a model may ask for a command. Default 10 min.
    pub max_command_timeout: Duration,
    /// The longest a sandbox create may take. Default 5 min.
    pub create_timeout: Duration,
    /// Which paths the tools accept.
    pub paths: PathPolicy,
    /// The value of [`OWNER_LABEL`] on sandboxes this set creates, and the one it lists; it
    /// also scopes the idempotency keys of its creates. Default: the user running the tools
    /// ([`Owner::current_user_id`]: `u{uid}.{host}`), so users sharing a provider account do
    /// not adopt, list or destroy each other's sandboxes; set one value for every process
    /// (any user, any host) that should share a fleet.
    pub owner: String,
    /// Connect to and destroy only sandboxes carrying this set's owner label (and the sandbox
    /// the set was built with). Default true.
    pub only_ours: bool,
    /// Secret values scrubbed from every output. Default: the host's credential variables
    /// ([`Redactor::with_host_credentials`]).
    pub redactor: Redactor,
    /// Send a call that names no `sandbox_id` to the current sandbox (the one last created or
    /// connected to). Default true. Set false for a set shared by clients that cannot be told
    /// apart (MCP requests without a session): one client's create must not move another's
    /// calls, so each call then names its sandbox, except on a set built for one sandbox.
    pub implicit_sandbox: bool,
    /// Show a private preview link's token (in the URL or headers) to the model. Default false:
    /// the link is returned with the token replaced and only the header names shown.
    pub reveal_preview_tokens: bool,
}

impl Default for ToolConfig {
    fn default() -> Self {
        ToolConfig {
            read_only: false,
            max_output_bytes: 16 * 1024,
            max_images: 4,
            max_image_bytes: 4 * 1024 * 1024,
            max_file_bytes: 8 * 1024 * 1024,
            max_list_entries: 500,
            call_timeout: Duration::from_secs(120),
            default_command_timeout: Duration::from_secs(60),
            max_command_timeout: Duration::from_secs(600),
            create_timeout: Duration::from_secs(300),
            paths: PathPolicy::sandbox_view(),
            owner: Owner::current_user_id(),
            only_ours: true,
            redactor: Redactor::new().with_host_credentials(),
            implicit_sandbox: true,
            reveal_preview_tokens: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_owner_is_the_current_user_not_a_shared_name() {
        let owner = ToolConfig::default().owner;
        assert_ne!(owner, "sandbox-tools");
        assert_eq!(owner, Owner::current_user_id());
        // A valid owner id, so sbox can reap by it.
        assert!(
            Owner::with_prefix("sandbox_tools", owner.as_str()).is_ok(),
            "{owner}"
        );
    }
}
