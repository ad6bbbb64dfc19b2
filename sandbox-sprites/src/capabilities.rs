//! The Sprites adapter's one capability map.

use sandbox_sdk_core::{Capabilities, Flags, Level, PreviewModel};

/// What the Sprites adapter offers (PROTOCOL.md §4–§9).
///
/// - No `stop`, `pause` or `set_timeout`: Sprites has no such calls; a sprite hibernates by
///   itself when idle and wakes on the next call, keeping its disk (§4.5).
/// - `background`, `streaming` and `kill_process` are native: exec sessions outlive their
///   socket, stream over a WebSocket, and are killed by signal (§5). stdin and the pty (TTY
///   sessions with resize, §5.3) are native.
/// - `files_upload` is native for read, write, list, delete and rename (§7); stat reads the
///   parent's listing and mkdir runs `mkdir -p`.
/// - `expose_port`: one public URL per sprite, reaching one port (§9), handed out only when
///   it is public (`private_preview` unsupported: the token it needs is the organisation's).
/// - `snapshot` is a checkpoint (§8), restored in place; no `fork`. `region` is sent in the
///   create's `config` (whether Sprites honours it is unconfirmed, §15).
/// - `code_interpreter` and `stateful_kernel` are emulated: Sprites has no kernel, so core's
///   driver runs over an exec session with stdin (the sprite needs `python3`).
///
/// Flags: commands take env and cwd natively (env through `env(1)`, which keeps the sprite's
/// environment); exit codes come from the exit frame; `preserves_disk_on_stop` is true
/// (hibernation keeps the disk, §4.5).
pub const CAPABILITIES: Capabilities = Capabilities {
    list: Level::Native,
    background: Level::Native,
    streaming: Level::Native,
    kill_process: Level::Native,
    pty: Level::Native,
    stdin: Level::Native,
    files_upload: Level::Native,
    expose_port: Level::Native,
    snapshot: Level::Native,
    region: Level::Native,
    code_interpreter: Level::Emulated,
    stateful_kernel: Level::Emulated,
    flags: Flags {
        preserves_memory_on_pause: false,
        preserves_disk_on_stop: true,
        per_command_env_cwd: true,
        exit_code_native: true,
        preview_model: PreviewModel::Subdomain,
    },
    ..Capabilities::NONE
};
