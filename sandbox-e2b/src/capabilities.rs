//! What E2B can do, as one literal (`prepare` is templates by content hash; `usage` is
//! unsupported because E2B has no usage meter: the client's emulation estimates it). Every
//! `Native` entry is exercised by the conformance suite,
//! except `egress_control` and `volumes`, which no core trait operation reaches: they are E2B
//! inherent methods (`CreateOptions`, `E2bSandbox::update_network`,
//! `E2bProvider::create_volume`) proven by `tests/create.rs` and marked `covered_elsewhere` in
//! `tests/conformance.rs`. `code_interpreter` and `stateful_kernel` are native where the
//! template serves the interpreter (`code-interpreter-v1` and templates built from it); on
//! other templates the same calls run core's emulated kernel, and say so on every result.

use sandbox_sdk_core::{Capabilities, Flags, Level, PreviewModel};

/// E2B's capability map.
pub const CAPABILITIES: Capabilities = Capabilities {
    list: Level::Native,
    stop: Level::Unsupported,
    pause: Level::Native,
    set_timeout: Level::Native,
    background: Level::Native,
    streaming: Level::Native,
    kill_process: Level::Native,
    pty: Level::Native,
    stdin: Level::Native,
    files_watch: Level::Native,
    files_upload: Level::Native,
    code_interpreter: Level::Native,
    stateful_kernel: Level::Native,
    expose_port: Level::Native,
    private_preview: Level::Native,
    egress_control: Level::Native,
    ssh: Level::Unsupported,
    proxied_fetch: Level::Unsupported,
    snapshot: Level::Native,
    fork: Level::Native,
    volumes: Level::Native,
    gpu: Level::Unsupported,
    region: Level::Unsupported,
    secrets_vault: Level::Unsupported,
    metrics: Level::Native,
    usage: Level::Unsupported,
    prepare: Level::Native,
    flags: Flags {
        preserves_memory_on_pause: true,
        preserves_disk_on_stop: false,
        per_command_env_cwd: true,
        exit_code_native: true,
        preview_model: PreviewModel::Subdomain,
    },
};
