//! What Daytona can do through this adapter: the one [`CAPABILITIES`] literal.

use crate::config::ExecTransport;
use sandbox_sdk_core::{Capabilities, Flags, Level, PreviewModel};

/// Daytona's capability map. Only what this crate implements and its tests prove is `Native`.
///
/// `streaming` is `Unsupported` although output is followed live over the log WebSocket:
/// Daytona's session wrapper reads each stream line by line, so a partial line reaches the
/// client only when its newline (or the end) arrives — live per line, not per byte as the
/// capability means. `stdin` and `pty` are `Unsupported`: session input cannot send an end of
/// file, and the PTY WebSocket API is not implemented. All three are `Native` with
/// [`ExecTransport::Ssh`] (see [`capabilities_for`]).
///
/// `region` (`target`), `volumes`, `egress_control` (network block-all and allow-lists) and
/// `gpu` are create options ([`DaytonaCreate`](crate::DaytonaCreate)); `usage` is the analytics
/// meter behind `Provider::usage` (estimated on an installation without one) and the
/// organization's limits ([`DaytonaProvider::limits`](crate::DaytonaProvider::limits));
/// `prepare` makes snapshots by content hash (`Provider::prepare`).
///
/// `stateful_kernel` is native (the daemon's interpreter contexts and WebSocket, PROTOCOL.md
/// §12); `code_interpreter` is emulated: the daemon returns text only, and a prelude the
/// adapter runs in each context adds results (the last expression, `display()`, matplotlib
/// figures), marked emulated.
pub const CAPABILITIES: Capabilities = Capabilities {
    list: Level::Native,
    stop: Level::Native,
    pause: Level::Native,
    set_timeout: Level::Native,
    background: Level::Native,
    kill_process: Level::Native,
    files_upload: Level::Native,
    expose_port: Level::Native,
    private_preview: Level::Native,
    snapshot: Level::Native,
    fork: Level::Native,
    metrics: Level::Native,
    ssh: Level::Native,
    // Create-time options, proven by the adapter's own tests (no trait operation shows them).
    region: Level::Native,
    volumes: Level::Native,
    egress_control: Level::Native,
    gpu: Level::Native,
    usage: Level::Native,
    prepare: Level::Native,
    stateful_kernel: Level::Native,
    code_interpreter: Level::Emulated,
    flags: FLAGS,
    ..Capabilities::NONE
};

/// Flags: archive and stop keep the disk; pause keeps memory (VM classes); exit codes are the
/// daemon's (`exitCode`, PROTOCOL.md §6.2); previews are per-port subdomains.
///
/// `per_command_env_cwd` is `false`: only `/process/execute` takes cwd and env (§6.1); a
/// session command does not (§6.2), and neither does a command over SSH. Core's one folding
/// ([`fold_env_cwd`](sandbox_sdk_core::emulate::fold_env_cwd)) puts them into `sh -c`, in the
/// client layer or, for a command sent to [`DaytonaSandbox`](crate::DaytonaSandbox) directly,
/// when the adapter builds its command line; a folded command passes it unchanged, so it is
/// folded once either way.
pub const FLAGS: Flags = Flags {
    preserves_memory_on_pause: true,
    preserves_disk_on_stop: true,
    per_command_env_cwd: false,
    exit_code_native: true,
    preview_model: PreviewModel::Subdomain,
};

/// The map for a transport: [`CAPABILITIES`], and with [`ExecTransport::Ssh`] also
/// byte-level `streaming`, `stdin` and `pty`, which commands over SSH have.
pub fn capabilities_for(transport: ExecTransport) -> Capabilities {
    let mut caps = CAPABILITIES;
    if transport == ExecTransport::Ssh {
        caps.streaming = Level::Native;
        caps.stdin = Level::Native;
        caps.pty = Level::Native;
    }
    caps
}
