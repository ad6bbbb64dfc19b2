//! What Daytona can do through this adapter: the one [`CAPABILITIES`] literal.

use sandbox_sdk_core::{Capabilities, Flags, Level, PreviewModel};

/// Daytona's capability map (with the default WebSocket log follower). Only what this crate
/// implements and its tests prove is `Native`.
pub const CAPABILITIES: Capabilities = Capabilities {
    list: Level::Native,
    stop: Level::Native,
    pause: Level::Native,
    set_timeout: Level::Native,
    background: Level::Native,
    streaming: Level::Native,
    kill_process: Level::Native,
    files_upload: Level::Native,
    expose_port: Level::Native,
    private_preview: Level::Native,
    snapshot: Level::Native,
    fork: Level::Native,
    ssh: Level::Native,
    flags: FLAGS,
    ..Capabilities::NONE
};

/// Flags: archive and stop keep the disk; pause keeps memory (VM classes); cwd and env are
/// applied by the adapter per command; exit codes are the daemon's; previews are per-port
/// subdomains.
pub const FLAGS: Flags = Flags {
    preserves_memory_on_pause: true,
    preserves_disk_on_stop: true,
    per_command_env_cwd: true,
    exit_code_native: true,
    preview_model: PreviewModel::Subdomain,
};
