//! A background process in the machine as the adapter addresses it: its id (checked, since it
//! names files), the path prefix of its files, the process scripts run on the machine, their
//! failures as errors, and [`PolledControl`], which kills it through the `KILL` script.

use super::scripts;
use crate::api::{Api, ScriptCall, ScriptExec, script_output};
use crate::config::PROVIDER;
use crate::wire::ExecResponse;
use async_trait::async_trait;
use base64::Engine;
use bytes::Bytes;
use sandbox_sdk_core::emulate::files::script_error;
use sandbox_sdk_core::{Error, ProcessControl, PtySize, Result};

pub(super) fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// `text` as base64, line breaks and other whitespace ignored.
pub(super) fn decode_b64(text: &str) -> Option<Bytes> {
    let joined: String = text.split_whitespace().collect();
    b64().decode(joined).ok().map(Bytes::from)
}

/// Runs one of the process scripts on `machine` (see [`ScriptExec::exec`]).
pub(super) async fn run_script(
    api: &Api,
    machine: &str,
    call: ScriptCall<'_>,
) -> Result<ExecResponse> {
    let runner = ScriptExec {
        api: api.clone(),
        machine: machine.to_owned(),
    };
    runner.exec(call).await
}

/// What becomes of a background process's files in the machine (`DIR.out`, `DIR.err`,
/// `DIR.exit`, …; see [`process_dir`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ProcessFiles {
    /// Kept: a background process, which can be listed, reattached and read again.
    Keep,
    /// Removed once everything is read, or with the kill: a foreground process, which nobody
    /// polls again once its handle is done.
    Remove,
}

/// Where a process id comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IdSource {
    /// The caller's tag: it may be asked for again, and may take over the id of a finished
    /// process.
    Tag,
    /// This handle's counter (`p{seq}…`): no later command can ask for it.
    Counter,
}

/// The launch and poll scripts' clean flag: `0` keeps the process's files (a background
/// process), `1` removes them once everything is read, `2` does so in the background after
/// answering, for an id from the counter that no later command can ask for, so the removal
/// races with nothing.
pub(super) fn clean_flag(files: ProcessFiles, id: IdSource) -> &'static str {
    match (files, id) {
        (ProcessFiles::Keep, _) => "0",
        (ProcessFiles::Remove, IdSource::Tag) => "1",
        (ProcessFiles::Remove, IdSource::Counter) => "2",
    }
}

/// A process script's failure as an error naming `what` (the core's exit-status conventions:
/// 44 no such process, 47 an id in use).
pub(super) fn failure(resp: ExecResponse, op: &str, machine: &str, what: &str) -> Error {
    script_error(&script_output(resp), PROVIDER, op, machine, what)
}

/// The path prefix of a background process's files inside the machine (`DIR.pid`, `DIR.out`, …).
pub(super) fn process_dir(pid: &str) -> String {
    format!("{}/{pid}", scripts::ROOT)
}

/// Process ids name directories, so only `[A-Za-z0-9_.-]` (not starting with `.`) is accepted.
pub(super) fn validate_pid(pid: &str) -> Result<()> {
    let ok = !pid.is_empty()
        && pid.len() <= 64
        && !pid.starts_with('.')
        && pid
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::validation(format!(
            "invalid process id or tag {pid:?}: use letters, digits, '_', '-' and '.'"
        ))
        .with_provider(PROVIDER))
    }
}

/// Kills a polled process through the `KILL` script.
pub(super) struct PolledControl {
    pub api: Api,
    pub machine: String,
    pub pid: String,
}

impl PolledControl {
    /// Kills the process; with [`ProcessFiles::Remove`] also removes its files (output
    /// included) from the machine, for a process nobody will poll again.
    pub(super) async fn kill_now(&self, files: ProcessFiles) -> Result<()> {
        let dir = process_dir(&self.pid);
        let mut args = vec![dir.as_str()];
        if files == ProcessFiles::Remove {
            args.push("1");
        }
        let call = ScriptCall::new(scripts::KILL, &args);
        let resp = run_script(&self.api, &self.machine, call).await?;
        match resp.exit_code.unwrap_or(0) {
            0 => Ok(()),
            _ => Err(failure(
                resp,
                "kill_process",
                &self.machine,
                &format!("process {}", self.pid),
            )),
        }
    }
}

/// Kills the background process `pid` of `machine`; its files stay, so its output can still be
/// read and its exit is recorded.
pub(crate) async fn kill(api: &Api, machine: &str, pid: &str) -> Result<()> {
    validate_pid(pid)?;
    PolledControl {
        api: api.clone(),
        machine: machine.to_owned(),
        pid: pid.to_owned(),
    }
    .kill_now(ProcessFiles::Keep)
    .await
}

#[async_trait]
impl ProcessControl for PolledControl {
    async fn kill(&self) -> Result<()> {
        // The stream (if any) still polls for the recorded exit, and cleans up after it.
        self.kill_now(ProcessFiles::Keep).await
    }

    async fn resize(&self, _size: PtySize) -> Result<()> {
        Err(Error::not_supported(PROVIDER, "pty"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_are_restricted_to_safe_characters() {
        assert!(validate_pid("p0123abc").is_ok());
        assert!(validate_pid("job-1.x").is_ok());
        for bad in ["", "../x", ".hidden", "a/b", "a b", "a$b"] {
            assert!(validate_pid(bad).is_err(), "{bad}");
        }
    }
}
