//! The Fly adapter's one capability map.

use sandbox_sdk_core::{Capabilities, Flags, Level, PreviewModel};

/// What the Fly adapter offers. Emulated entries are built from `/exec`: streaming and background
/// processes (polled output files), kill, stdin (sent whole when the writer closes) and files.
/// Volumes are existing Fly volumes mounted at create ([`crate::FlyBuilder::mount`]).
///
/// `code_interpreter` and `stateful_kernel` are emulated: Fly has no kernel, so core's driver
/// runs as a polled process, and because stdin reaches a process only when it is closed, its
/// requests travel as mailbox files (PROTOCOL.md §8.1).
///
/// `per_command_env_cwd` is `false`: `/exec` takes neither (PROTOCOL.md §8). Core's one
/// folding ([`fold_env_cwd`](sandbox_sdk_core::emulate::fold_env_cwd)) puts them into
/// `sh -c`, in the client layer or, for a command sent to [`crate::FlySandbox`] directly, in the
/// adapter; a folded command passes it unchanged, so it is folded once either way.
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
    code_interpreter: Level::Emulated,
    stateful_kernel: Level::Emulated,
    flags: Flags {
        preserves_memory_on_pause: true,
        preserves_disk_on_stop: false,
        per_command_env_cwd: false,
        exit_code_native: true,
        preview_model: PreviewModel::DeclaredPorts,
    },
    ..Capabilities::NONE
};
