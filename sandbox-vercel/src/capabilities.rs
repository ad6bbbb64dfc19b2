//! The Vercel adapter's one capability map.

use sandbox_sdk_core::{Capabilities, Flags, Level, PreviewModel};

/// What the Vercel adapter offers (PROTOCOL.md §4–§10).
///
/// - `stop` is native (the session stops; `resume` starts a new session from the sandbox's
///   latest snapshot, §4.3). There is no pause that keeps memory, so `pause` is unsupported.
/// - `set_timeout` extends the running session (`extend-timeout` only adds, §5.1): the session
///   is made to last until now plus the time asked; a shorter time cannot be set and is left.
/// - `background`, `streaming` and `kill_process` are native: detached commands, NDJSON logs,
///   kill by signal (§6). `stdin` is native: a command started with `attachStdin` takes its
///   input as ordered, offset-carrying `POST …/stdin` requests (§6.6). There is no pty in the
///   REST API.
/// - `files_upload` is native for what moves bytes: write (a gzip tar), read (streamed) and
///   mkdir (§7). The API has no list, stat, remove or rename (§7.4): those run as commands
///   through the core's files-over-exec scripts.
/// - `expose_port`: public routes for the ports declared at create (§8), no token
///   (`private_preview` unsupported).
/// - `snapshot` and `fork` are native (§10); `region` is sent at create.
/// - `code_interpreter` and `stateful_kernel` are emulated: Vercel has no kernel, so core's
///   driver runs as a command with stdin (§6.6; the sandbox's image needs `python3`).
///
/// Flags: commands take env and cwd natively; exit codes come from the command object;
/// `preserves_disk_on_stop` is true because sandboxes are persistent by default (a stop
/// snapshots the disk and a resume restores it, §4.1), unless created with
/// `persistent: false`.
pub const CAPABILITIES: Capabilities = Capabilities {
    list: Level::Native,
    stop: Level::Native,
    set_timeout: Level::Native,
    background: Level::Native,
    streaming: Level::Native,
    kill_process: Level::Native,
    stdin: Level::Native,
    files_upload: Level::Native,
    expose_port: Level::Native,
    snapshot: Level::Native,
    fork: Level::Native,
    region: Level::Native,
    code_interpreter: Level::Emulated,
    stateful_kernel: Level::Emulated,
    flags: Flags {
        preserves_memory_on_pause: false,
        preserves_disk_on_stop: true,
        per_command_env_cwd: true,
        exit_code_native: true,
        preview_model: PreviewModel::DeclaredPorts,
    },
    ..Capabilities::NONE
};
