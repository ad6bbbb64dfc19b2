//! The shell line a command becomes in a session, and the end marks that make its output exact
//! (PROTOCOL.md §8.1): [`command_line`], [`Trailer`], and how a command's end is reported
//! ([`exit_event`]).
//!
//! The end marks are not core's [`ExitMarker`](sandbox_sdk_core::emulate::ExitMarker): they
//! do another job. The exit code is native (the daemon's `exitCode`); the marks are on both
//! streams, to take back the newline the daemon's line reader adds to a last partial line of
//! each, and the follower must see that both are complete *while the stream is open*, to end
//! as soon as the command does instead of waiting for the server's close (PROTOCOL.md §8.2).
//! `ExitMarker` marks stdout only and tells whether its marker was seen only by finishing.

use crate::config::PROVIDER;
use bytes::Bytes;
use sandbox_sdk_core::shell::{quote_argv, shell_quote, shell_script};
use sandbox_sdk_core::{Command, Error, ErrorKind, ExitStatus, ProcessEvent, Result};
use std::time::Duration;
use tokio::time::Instant;

/// Exit status reported for a command killed through [`ProcessControl::kill`] or
/// `kill_process` (the session's shell gets SIGKILL).
pub(crate) const SIGKILL: i32 = 9;

/// The statuses coreutils `timeout` ends with when it stopped the command: 124 after SIGTERM,
/// 137 when the grace (`-k 5`) ran out and it sent SIGKILL.
const TIMEOUT_STATUSES: [i32; 2] = [124, 137];

/// The shell line a [`Command`] becomes: a subshell of the session's shell (a fork, not a new
/// shell; `cd`, exports and `exit` stay inside it) running the quoted argv, or the core's
/// script (cwd and env applied with safe quoting), wrapped in coreutils `timeout` when the
/// command has a process timeout. It starts with the no-op `: sdk-cmd-{label}`, which makes the
/// line unique within its session so a command still running after the direct window can be
/// found by its text.
///
/// The daemon's session wrapper reads each stream line by line and ends every line with `\n`,
/// so a last line without one would gain a newline. To give back the exact bytes, the line ends
/// by printing the end mark on both streams after the command: `{END_MARK}:{status}` on stdout
/// and [`END_MARK`] on stderr, each with a newline, then exits with the command's status. The
/// follower strips exactly those suffixes, and once both are seen it knows the output is
/// complete and the exit status without asking the daemon. Output that lacks them (a killed
/// command, a command started elsewhere) is passed on unchanged.
pub(crate) fn command_line(command: &Command, label: u64) -> Result<String> {
    command.validate()?;
    let direct = command.cwd.is_none() && command.env.is_empty();
    let inner = if command.timeout.is_zero() {
        if let (true, [sh, c, script]) = (direct, command.argv.as_slice())
            && sh == "sh"
            && c == "-c"
        {
            // A shell line runs in a nested subshell: one process less than `sh -c` (a fork,
            // not an exec); the newline keeps a trailing comment from eating the `)`.
            format!("({script}\n)")
        } else if direct {
            quote_argv(&command.argv)?
        } else {
            // A subshell, so the script's `exec` replaces it and not the shell printing the mark.
            format!("({})", shell_script(command)?)
        }
    } else {
        let secs = command.timeout.as_millis().div_ceil(1000).max(1);
        let program = if direct {
            quote_argv(&command.argv)?
        } else {
            format!("sh -c {}", shell_quote(&shell_script(command)?)?)
        };
        format!("timeout -k 5 {secs} {program}")
    };
    Ok(format!(
        "(: sdk-cmd-{label}; {inner}; s=$?; printf '%s:%s\\n' {END_MARK} \"$s\"; printf '%s\\n' {END_MARK} >&2; exit $s)"
    ))
}

/// The line printed on stdout (with `:status`) and stderr after the command (see
/// [`command_line`]).
pub(crate) const END_MARK: &str = "__sandbox_sdk_end_of_output__";

/// The longest end-mark line: the mark, `:`, a status of up to 10 digits, the newline.
const MAX_MARK_LEN: usize = END_MARK.len() + 12;

/// Whether `tail` is the start of an end-mark line (`Some(false)`), a whole one ending in its
/// newline (`Some(true)`), or neither (`None`).
fn mark_prefix(tail: &[u8]) -> Option<bool> {
    let mark = END_MARK.as_bytes();
    if tail.len() <= mark.len() {
        return (tail == &mark[..tail.len()]).then_some(false);
    }
    if &tail[..mark.len()] != mark {
        return None;
    }
    match &tail[mark.len()..] {
        [b'\n'] => Some(true),
        [b':', rest @ ..] => {
            let (digits, whole) = match rest.split_last() {
                Some((b'\n', digits)) => (digits, true),
                _ => (rest, false),
            };
            let valid = digits.len() <= 10
                && digits.iter().all(u8::is_ascii_digit)
                && !(whole && digits.is_empty());
            valid.then_some(whole)
        }
        _ => None,
    }
}

/// Holds back the end of one stream while it could still be (the start of) the end mark, so
/// output is passed on as soon as it cannot be part of it.
#[derive(Default)]
pub(crate) struct Trailer {
    held: Vec<u8>,
}

impl Trailer {
    /// Appends `data`; returns what can be passed on now: everything but the longest tail
    /// that is a beginning of an end-mark line.
    pub(crate) fn push(&mut self, data: &[u8]) -> Option<Bytes> {
        self.held.extend_from_slice(data);
        let from = self.held.len().saturating_sub(MAX_MARK_LEN);
        let ready = (from..self.held.len())
            .find(|i| mark_prefix(&self.held[*i..]).is_some())
            .unwrap_or(self.held.len());
        (ready > 0).then(|| Bytes::from(self.held.drain(..ready).collect::<Vec<u8>>()))
    }

    /// `Some` once the stream ends in a whole end mark, with the status it carries (stdout's).
    pub(crate) fn complete(&self) -> Option<Option<i32>> {
        if mark_prefix(&self.held) != Some(true) {
            return None;
        }
        let text = std::str::from_utf8(&self.held).ok()?;
        Some(
            text.trim_end()
                .strip_prefix(END_MARK)
                .and_then(|rest| rest.strip_prefix(':'))
                .and_then(|status| status.parse().ok()),
        )
    }

    /// The rest of the stream: nothing when it is exactly an end mark.
    pub(crate) fn finish(&mut self) -> Option<Bytes> {
        if self.complete().is_some() {
            self.held.clear();
            return None;
        }
        let held = std::mem::take(&mut self.held);
        (!held.is_empty()).then(|| Bytes::from(held))
    }
}

/// A command's process timeout and when it was sent, to tell a `timeout` stop from an exit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    limit: Duration,
    started: Instant,
}

impl Timing {
    pub(crate) fn of(command: &Command) -> Option<Timing> {
        (!command.timeout.is_zero()).then(|| Timing {
            limit: command.timeout,
            started: Instant::now(),
        })
    }
}

/// The last event of a command that ended with `code`: its exit, or a `Timeout` error when
/// coreutils `timeout` stopped it (status 124 or 137 once its timeout has passed), as the other
/// adapters report a process timeout.
pub(crate) fn exit_event(code: i32, timing: Option<&Timing>) -> Result<ProcessEvent> {
    if let Some(t) = timing
        && TIMEOUT_STATUSES.contains(&code)
        && t.started.elapsed() >= t.limit
    {
        return Err(Error::new(
            ErrorKind::Timeout,
            format!(
                "the process ran past its timeout of {}s and was stopped (exit status {code})",
                t.limit.as_secs_f64()
            ),
        )
        .with_provider(PROVIDER)
        .with_operation("exec"));
    }
    Ok(ProcessEvent::Exit(ExitStatus::code(code)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_quote_and_fold_cwd_env_and_timeout() {
        assert_eq!(
            command_line(&Command::shell("exit 3"), 7).unwrap(),
            format!(
                "(: sdk-cmd-7; (exit 3\n); s=$?; printf '%s:%s\\n' {END_MARK} \"$s\"; printf '%s\\n' {END_MARK} >&2; exit $s)"
            )
        );
        assert!(command_line(&Command::new("x").arg("a\0"), 1).is_err());
    }

    fn run_line(line: &str, dir: &std::path::Path) -> std::process::Output {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(line)
            .current_dir(dir)
            .output()
            .unwrap()
    }

    #[test]
    fn the_end_mark_restores_exact_output_and_keeps_the_exit_code() {
        let dir = std::env::temp_dir();
        for (script, out, err, code) in [
            ("printf out; printf err >&2; exit 3", "out", "err", 3),
            ("echo out; echo err >&2", "out\n", "err\n", 0),
            ("exit 0", "", "", 0),
            // A shell line runs in a subshell: a trailing comment must not eat its `)`.
            ("echo out # a comment", "out\n", "", 0),
            ("cd /; exit 5", "", "", 5),
        ] {
            let result = run_line(&command_line(&Command::shell(script), 1).unwrap(), &dir);
            assert_eq!(result.status.code(), Some(code), "{script}");
            for (i, (stream, want)) in [(&result.stdout, out), (&result.stderr, err)]
                .into_iter()
                .enumerate()
            {
                // What the daemon's line wrapper would log, then what the follower gives back.
                let mut trailer = Trailer::default();
                let mut got = Vec::new();
                for chunk in stream.chunks(3) {
                    got.extend(trailer.push(chunk).unwrap_or_default());
                }
                // Both streams end on a whole mark; stdout's carries the exit status.
                let want_status = if i == 0 { Some(code) } else { None };
                assert_eq!(trailer.complete(), Some(want_status), "{script}");
                got.extend(trailer.finish().unwrap_or_default());
                assert_eq!(String::from_utf8(got).unwrap(), want, "{script}");
            }
        }
    }

    #[test]
    fn a_stream_without_the_end_mark_is_passed_on_whole() {
        let mut trailer = Trailer::default();
        let mut got = Vec::new();
        got.extend(
            trailer
                .push(b"partial output of a killed command")
                .unwrap_or_default(),
        );
        assert_eq!(trailer.complete(), None);
        got.extend(trailer.finish().unwrap_or_default());
        assert_eq!(got, b"partial output of a killed command");
        // A mark the command printed itself, followed by more output, is output.
        let mut trailer = Trailer::default();
        let mut got = Vec::new();
        for piece in [format!("{END_MARK}:3\n").as_bytes(), b"more\n"] {
            got.extend(trailer.push(piece).unwrap_or_default());
        }
        got.extend(trailer.finish().unwrap_or_default());
        assert_eq!(got, format!("{END_MARK}:3\nmore\n").into_bytes());
    }

    /// A hostile output made of endless end-mark beginnings (never a whole line) cannot make
    /// the trailer hold more than one mark line beyond the chunk just pushed: it is passed on.
    #[test]
    fn the_held_tail_stays_within_one_mark_line() {
        let mut trailer = Trailer::default();
        let prefix = &END_MARK.as_bytes()[..END_MARK.len() - 1];
        let mut passed = 0;
        for _ in 0..10_000 {
            passed += trailer.push(prefix).map_or(0, |b| b.len());
            assert!(trailer.held.len() <= MAX_MARK_LEN, "{}", trailer.held.len());
        }
        assert_eq!(passed + trailer.held.len(), 10_000 * prefix.len());
        let digits = format!("{END_MARK}:{}", "9".repeat(100_000));
        passed = trailer.push(digits.as_bytes()).map_or(0, |b| b.len());
        assert!(passed > 0 && trailer.held.len() <= MAX_MARK_LEN);
    }

    #[test]
    fn mark_prefixes_are_recognised_exactly() {
        let m = END_MARK;
        for (tail, want) in [
            (String::new(), Some(false)),
            (m[..5].to_owned(), Some(false)),
            (m.to_string(), Some(false)),
            (format!("{m}:"), Some(false)),
            (format!("{m}:12"), Some(false)),
            (format!("{m}\n"), Some(true)),
            (format!("{m}:12\n"), Some(true)),
            (format!("{m}:\n"), None),
            (format!("{m}x"), None),
            (format!("{m}:1x"), None),
            (format!("{m}:12345678901"), None),
            ("x".to_owned(), None),
        ] {
            assert_eq!(mark_prefix(tail.as_bytes()), want, "{tail:?}");
        }
    }

    #[test]
    fn a_timeout_stop_is_a_timeout_error_and_a_plain_124_is_an_exit() {
        let long_ago = Timing {
            limit: Duration::from_millis(1),
            started: Instant::now() - Duration::from_secs(1),
        };
        let e = exit_event(124, Some(&long_ago)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(exit_event(137, Some(&long_ago)).is_err());
        assert!(
            matches!(exit_event(3, Some(&long_ago)), Ok(ProcessEvent::Exit(s)) if s.code == Some(3))
        );
        // Exit 124 before the timeout could have passed, or without a timeout, is the command's.
        let just_now = Timing {
            limit: Duration::from_secs(60),
            started: Instant::now(),
        };
        assert!(exit_event(124, Some(&just_now)).is_ok());
        assert!(exit_event(124, None).is_ok());
    }

    #[test]
    fn the_command_line_runs_in_a_real_shell() {
        // The daemon hands the line to the session's shell; `sh` here proves the quoting.
        let dir = std::env::temp_dir().join(format!("sandbox-daytona-line-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("conformance-cwd")).unwrap();
        for timeout in [Duration::ZERO, Duration::from_secs(5)] {
            let cmd = Command::shell("printf '%s|%s' \"$CONFORMANCE_VAR\" \"${PWD##*/}\"")
                .cwd("conformance-cwd")
                .env("CONFORMANCE_VAR", "it's a $HOME \"test\"")
                .timeout(timeout);
            let out = run_line(&command_line(&cmd, 1).unwrap(), &dir);
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                format!("it's a $HOME \"test\"|conformance-cwd{END_MARK}:0\n"),
                "timeout {timeout:?}"
            );
            assert!(out.status.success());
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
