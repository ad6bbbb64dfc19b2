//! A command run by one buffered `POST …/exec`: its argv, a server-side timeout and its whole
//! stdin go in one request, and its output and exit code come back in the answer. Such a
//! process cannot be killed once sent.

use super::stdin::spawn_stdin_collector;
use crate::api::{Api, script_output};
use crate::config::{DIRECT_ANSWER_LIMIT, PROVIDER};
use crate::wire::{ExecRequest, ExecResponse};
use async_trait::async_trait;
use base64::Engine;
use bytes::Bytes;
use futures::StreamExt;
use sandbox_sdk_core::{
    Command, Error, ErrorKind, ExitStatus, Process, ProcessControl, ProcessEvent, PtySize, Result,
    Stdin,
};
use std::sync::Arc;

/// One buffered `/exec` of `argv` with `stdin`. Non-UTF-8 stdin is sent in base64 and decoded
/// in the machine, because `/exec` takes stdin as a JSON string.
pub(super) async fn exec_direct(
    api: &Api,
    machine: &str,
    argv: Vec<String>,
    secs: u64,
    stdin: Option<Bytes>,
) -> Result<ExecResponse> {
    let (command, stdin) = match stdin {
        None => (argv, None),
        Some(bytes) => match String::from_utf8(bytes.to_vec()) {
            Ok(text) => (argv, Some(text)),
            Err(_) => {
                let mut wrapped: Vec<String> = ["sh", "-c", "base64 -d | \"$@\"", "sh"]
                    .map(String::from)
                    .to_vec();
                wrapped.extend(argv);
                let encoded = base64::engine::general_purpose::STANDARD.encode(&bytes);
                (wrapped, Some(encoded))
            }
        },
    };
    api.exec(
        machine,
        &ExecRequest {
            command,
            timeout: Some(secs.max(1)),
            stdin,
        },
        DIRECT_ANSWER_LIMIT,
    )
    .await
}

fn exit_status(resp: &ExecResponse) -> ExitStatus {
    script_output(resp.clone()).output.status
}

fn direct_events(resp: ExecResponse) -> Vec<Result<ProcessEvent>> {
    let status = exit_status(&resp);
    let mut events = Vec::new();
    if let Some(out) = resp.stdout.filter(|s| !s.is_empty()) {
        events.push(Ok(ProcessEvent::Stdout(Bytes::from(out))));
    }
    if let Some(err) = resp.stderr.filter(|s| !s.is_empty()) {
        events.push(Ok(ProcessEvent::Stderr(Bytes::from(err))));
    }
    events.push(Ok(ProcessEvent::Exit(status)));
    events
}

/// Control of a buffered `/exec`: it cannot be interrupted once sent.
struct DirectControl;

#[async_trait]
impl ProcessControl for DirectControl {
    async fn kill(&self) -> Result<()> {
        Err(Error::new(
            ErrorKind::NotSupported,
            "a command run through one buffered /exec cannot be killed; run it without a timeout \
             or in the background to get a killable process",
        )
        .with_provider(PROVIDER)
        .with_operation("kill_process"))
    }

    async fn resize(&self, _size: PtySize) -> Result<()> {
        Err(Error::not_supported(PROVIDER, "pty"))
    }
}

/// Starts `cmd` through one buffered `/exec`. Without stdin the call is made now (errors
/// surface from `exec`); with stdin it is made once the stdin writer is shut down.
pub(super) async fn start_direct(
    api: &Api,
    machine: &str,
    cmd: &Command,
    secs: u64,
) -> Result<Process> {
    let argv = cmd.argv.clone();
    if cmd.stdin {
        let (stdin, rx) = Stdin::channel(16);
        let collected = spawn_stdin_collector(rx);
        let api = api.clone();
        let machine_id = machine.to_owned();
        let events = futures::stream::once(async move {
            let input = collected.await?;
            exec_direct(&api, &machine_id, argv, secs, Some(input)).await
        })
        .flat_map(|result| {
            futures::stream::iter(match result {
                Ok(resp) => direct_events(resp),
                Err(e) => vec![Err(e)],
            })
        })
        .boxed();
        return Ok(
            Process::new("exec", events, Some(stdin), Arc::new(DirectControl))
                .with_emulated_streaming(),
        );
    }
    let resp = exec_direct(api, machine, argv, secs, None).await?;
    let events = futures::stream::iter(direct_events(resp)).boxed();
    Ok(Process::new("exec", events, None, Arc::new(DirectControl)).with_emulated_streaming())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_exit_status_prefers_the_signal() {
        let r = ExecResponse {
            exit_code: Some(-1),
            exit_signal: Some(9),
            ..ExecResponse::default()
        };
        assert_eq!(exit_status(&r), ExitStatus::signal(9));
        assert_eq!(exit_status(&ExecResponse::default()), ExitStatus::code(0));
    }
}
