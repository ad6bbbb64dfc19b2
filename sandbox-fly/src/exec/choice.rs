//! Which way a command runs: through one direct `/exec` (output at the end, not killable) or
//! launched in the background and followed by polling (live output, killable), and the
//! server-side timeout a direct `/exec` gets.

use crate::config::Settings;
use sandbox_sdk_core::Command;

/// The way one command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// One buffered `/exec` with this server-side timeout, in whole seconds.
    Direct { secs: u64 },
    /// Launched in the background and followed by polling.
    Polled,
}

/// Foreground commands with a timeout within the direct limit (or all foreground commands with
/// [`crate::FlyBuilder::prefer_direct_exec`]) run through one buffered `/exec`; all others,
/// background commands and commands without a timeout or longer than the limit, are polled.
pub(super) fn route(settings: &Settings, command: &Command) -> Route {
    let fits = !command.timeout.is_zero() && command.timeout <= settings.direct_exec_limit;
    if !command.background && (fits || settings.prefer_direct_exec) {
        Route::Direct {
            secs: direct_secs(settings, command),
        }
    } else {
        Route::Polled
    }
}

/// The server-side timeout of a direct `/exec` of `command`: its timeout capped at the direct
/// limit (the limit when it has none), in whole seconds, at least 1.
pub(super) fn direct_secs(settings: &Settings, command: &Command) -> u64 {
    let limit = settings.direct_exec_limit;
    let t = if command.timeout.is_zero() {
        limit
    } else {
        command.timeout.min(limit)
    };
    t.as_secs_f64().ceil().max(1.0) as u64
}
