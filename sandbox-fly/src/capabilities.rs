//! The Fly adapter's one capability map.

use sandbox_sdk_core::{Capabilities, Flags, Level, PreviewModel};

/// What the Fly adapter offers. Emulated entries are built from `/exec`: streaming and background
/// processes (polled output files), kill, stdin (sent whole when the writer closes) and files.
/// Volumes are existing Fly volumes mounted at create ([`crate::FlyBuilder::mount`]).
pub const CAPABILITIES: Capabilities = Capabilities {
    list: Level::Native,
    stop: Level::Native,
    pause: Level::Native,
    background: Level::Emulated,
    streaming: Level::Emulated,
    kill_process: Level::Emulated,
    stdin: Level::Emulated,
    files_upload: Level::Emulated,
    expose_port: Level::Native,
    region: Level::Native,
    volumes: Level::Native,
    flags: Flags {
        preserves_memory_on_pause: true,
        preserves_disk_on_stop: false,
        per_command_env_cwd: true,
        exit_code_native: true,
        preview_model: PreviewModel::DeclaredPorts,
    },
    ..Capabilities::NONE
};
