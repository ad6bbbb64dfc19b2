//! The adapter's own shell scripts sent through `/exec` (`sh -c SCRIPT sh ARGS…`): files (the
//! core's [`sandbox_sdk_core::emulate::files`]) and background processes
//! ([`crate::exec`]'s scripts), with the deadline and answer limit each kind gets.

use super::Api;
use crate::config::{LISTING_ANSWER_LIMIT, PROVIDER, SCRIPT_ANSWER_LIMIT};
use crate::wire::{ExecRequest, ExecResponse};
use async_trait::async_trait;
use bytes::Bytes;
use sandbox_sdk_core::emulate::files::{ScriptOutput, ScriptRunner};
use sandbox_sdk_core::{ExitStatus, Output, Result};

/// The server-side deadline, in whole seconds, of one of the adapter's own scripts (file chunks,
/// stat, kill, listing, launch, poll): they do little work in the machine, so they get the
/// request timeout (at least 1 s), plus the `wait_secs` a launch or poll spends waiting in the
/// machine on purpose. The HTTP call is bounded by this deadline plus the request timeout
/// ([`Api::exec`]), so a silent server costs about twice the request timeout, never more.
pub(crate) fn script_secs(api: &Api, wait_secs: u64) -> u64 {
    let budget = api.settings.request_timeout.as_secs_f64().ceil().max(1.0) as u64;
    budget + wait_secs
}

/// Runs the adapter's scripts on one machine.
#[derive(Debug, Clone)]
pub(crate) struct ScriptExec {
    pub api: Api,
    pub machine: String,
}

/// How large an answer a script may send back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AnswerSize {
    /// At most [`SCRIPT_ANSWER_LIMIT`]: a file chunk, a stat, a launch, a poll, a kill.
    Script,
    /// At most [`LISTING_ANSWER_LIMIT`]: a directory or process listing.
    Listing,
}

/// One run of a script, `sh -c SCRIPT sh ARGS…`: by default without stdin, not waiting in the
/// machine on purpose, and answering at most [`AnswerSize::Script`].
#[derive(Debug, Clone)]
pub(crate) struct ScriptCall<'a> {
    script: &'a str,
    args: &'a [&'a str],
    stdin: Option<String>,
    wait_secs: u64,
    answer: AnswerSize,
}

impl<'a> ScriptCall<'a> {
    pub fn new(script: &'a str, args: &'a [&'a str]) -> ScriptCall<'a> {
        ScriptCall {
            script,
            args,
            stdin: None,
            wait_secs: 0,
            answer: AnswerSize::Script,
        }
    }

    /// Sends `stdin` with the script.
    pub fn stdin(mut self, stdin: Option<String>) -> Self {
        self.stdin = stdin;
        self
    }

    /// The script waits in the machine up to `secs` on purpose (a launch or a poll), so its
    /// deadline grows by as much (see [`script_secs`]).
    pub fn waiting(mut self, secs: u64) -> Self {
        self.wait_secs = secs;
        self
    }

    /// Reads an answer of at most `size`.
    pub fn answer(mut self, size: AnswerSize) -> Self {
        self.answer = size;
        self
    }
}

impl ScriptExec {
    /// Runs `call` with the deadline of [`script_secs`] (its wait in the machine included),
    /// reading an answer of at most its [`AnswerSize`].
    pub async fn exec(&self, call: ScriptCall<'_>) -> Result<ExecResponse> {
        let mut command = vec![
            "sh".to_owned(),
            "-c".to_owned(),
            call.script.to_owned(),
            "sh".to_owned(),
        ];
        command.extend(call.args.iter().map(|a| (*a).to_owned()));
        let limit = match call.answer {
            AnswerSize::Script => SCRIPT_ANSWER_LIMIT,
            AnswerSize::Listing => LISTING_ANSWER_LIMIT,
        };
        let body = ExecRequest {
            command,
            timeout: Some(script_secs(&self.api, call.wait_secs)),
            stdin: call.stdin,
        };
        self.api.exec(&self.machine, &body, limit).await
    }
}

/// An `/exec` answer as the core's script output (request id kept for error reports).
pub(crate) fn script_output(resp: ExecResponse) -> ScriptOutput {
    let status = match resp.exit_signal {
        Some(sig) if sig > 0 => ExitStatus::signal(sig as i32),
        _ => ExitStatus::code(resp.exit_code.unwrap_or(0) as i32),
    };
    ScriptOutput {
        output: Output {
            stdout: Bytes::from(resp.stdout.unwrap_or_default()),
            stderr: Bytes::from(resp.stderr.unwrap_or_default()),
            status,
        },
        request_id: resp.request_id,
    }
}

#[async_trait]
impl ScriptRunner for ScriptExec {
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn sandbox_id(&self) -> &str {
        &self.machine
    }

    async fn run(
        &self,
        operation: &str,
        script: &str,
        args: &[&str],
        stdin: Option<String>,
    ) -> Result<ScriptOutput> {
        let size = if operation == "list_files" {
            AnswerSize::Listing
        } else {
            AnswerSize::Script
        };
        let call = ScriptCall::new(script, args).stdin(stdin).answer(size);
        let resp = self.exec(call).await?;
        Ok(script_output(resp))
    }
}
