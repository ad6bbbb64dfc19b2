//! Checks an adapter's own tests call, for behaviour the scenarios cannot see because they
//! always run behind the client layer.

use sandbox_sdk_core::emulate::EmulateSandbox;
use sandbox_sdk_core::{Command, Sandbox, SandboxExt};

/// The command [`env_cwd_folded_once`] runs: `pwd` in `/srv` with `GREETING=it's $HOME`.
pub fn env_cwd_command() -> Command {
    Command::new("pwd")
        .cwd("/srv")
        .env("GREETING", "it's $HOME")
}

/// For an adapter whose `per_command_env_cwd` is `false`: runs [`env_cwd_command`] on
/// `sandbox` directly, then through core's emulation layer ([`EmulateSandbox`], which the
/// client layer wraps every provider in), and asserts both print `/srv` and exit 0.
///
/// Mount the request that command becomes (its env and cwd folded by
/// [`fold_env_cwd`](sandbox_sdk_core::emulate::fold_env_cwd)) twice on the replay server,
/// each once: the adapter must fold a command sent to it directly (else the first call
/// misses), and pass one folded already unchanged (else the second, folded twice, misses).
///
/// # Panics
///
/// When the flag says `true`, a run fails, or an output differs.
pub async fn env_cwd_folded_once<S: Sandbox + Clone + 'static>(sandbox: &S) {
    assert!(
        !sandbox.capabilities().flags.per_command_env_cwd,
        "the adapter says per_command_env_cwd: true"
    );
    let cmd = env_cwd_command();
    let direct = sandbox.run(&cmd).await.expect("the direct run");
    let layered = EmulateSandbox::new(Box::new(sandbox.clone()))
        .run(&cmd)
        .await
        .expect("the run through core's emulation layer");
    for (how, out) in [("direct", direct), ("through the layer", layered)] {
        assert_eq!(
            (out.stdout_lossy(), out.status.code),
            ("/srv\n".into(), Some(0)),
            "{how}"
        );
    }
}
