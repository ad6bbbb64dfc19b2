//! The shell line a command becomes in a session, and the end marks that make its output exact
//! (PROTOCOL.md §8.1): [`command_line`], [`Trailer`], and how a command's end is reported
//! ([`exit_event`]).
//!
//! The end marks are read by core's [`MarkScanner`], but they are not its
//! [`ExitMarker`](sandbox_sdk_core::emulate::ExitMarker): they do another job. The exit code is
//! native (the daemon's `exitCode`); the marks are on both streams, to take back the newline
//! the daemon's line reader adds to a last partial line of each, they count only at the very
//! end of a stream, and the follower must see that both are complete *while the stream is
//! open*, to end as soon as the command does instead of waiting for the server's close
//! (PROTOCOL.md §8.2). The mark is fixed, not random: it is part of every command line sent.

use crate::config::PROVIDER;
use bytes::Bytes;
use sandbox_sdk_core::emulate::{MarkScanner, fold_env_cwd};
use sandbox_sdk_core::shell::quote_argv;
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
/// shell; `cd`, exports and `exit` stay inside it) running the quoted argv (cwd and env folded
/// into `sh -c` first by core's one folding, [`fold_env_cwd`]: a session command takes
/// neither, PROTOCOL.md §6.2), wrapped in coreutils `timeout` when the command has a process
/// timeout. It starts with the no-op `: sdk-cmd-{label}`, which makes the
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
    let command = fold_env_cwd(command)?;
    let inner = if command.timeout.is_zero() {
        if let [sh, c, script] = command.argv.as_slice()
            && sh == "sh"
            && c == "-c"
        {
            // A shell line runs in a nested subshell: one process less than `sh -c` (a fork,
            // not an exec); the newline keeps a trailing comment from eating the `)`.
            format!("({script}\n)")
        } else {
            quote_argv(&command.argv)?
        }
    } else {
        let secs = command.timeout.as_millis().div_ceil(1000).max(1);
        format!("timeout -k 5 {secs} {}", quote_argv(&command.argv)?)
    };
    Ok(format!(
        "(: sdk-cmd-{label}; {inner}; s=$?; printf '%s:%s\\n' {END_MARK} \"$s\"; printf '%s\\n' {END_MARK} >&2; exit $s)"
    ))
}

/// The line printed on stdout (with `:status`) and stderr after the command (see
/// [`command_line`]).
pub(crate) const END_MARK: &str = "__sandbox_sdk_end_of_output__";

/// What follows [`END_MARK`] on its line: nothing (stderr's mark), or `:` and the status in
/// up to 10 digits (stdout's).
fn end_mark_value(value: &[u8], whole: bool) -> bool {
    match value {
        [] => true,
        [b':', digits @ ..] => {
            digits.len() <= 10
                && digits.iter().all(u8::is_ascii_digit)
                && !(whole && digits.is_empty())
        }
        _ => false,
    }
}

/// One stream's end mark, read by core's [`MarkScanner`]: output is passed on as soon as it
/// cannot be part of a mark line that ends the stream.
pub(crate) struct Trailer {
    scan: MarkScanner,
}

impl Default for Trailer {
    fn default() -> Self {
        Trailer {
            scan: MarkScanner::new(END_MARK, end_mark_value).at_end(),
        }
    }
}

impl Trailer {
    /// Appends `data`; returns what can be passed on now.
    pub(crate) fn push(&mut self, data: &[u8]) -> Option<Bytes> {
        Some(self.scan.push(data)).filter(|out| !out.is_empty())
    }

    /// `Some` once the stream ends in a whole end mark, with the status it carries (stdout's).
    pub(crate) fn complete(&self) -> Option<Option<i32>> {
        let value = self.scan.value()?;
        Some(
            std::str::from_utf8(value.strip_prefix(b":").unwrap_or_default())
                .ok()
                .and_then(|status| status.parse().ok()),
        )
    }

    /// The rest of the stream: nothing when it is exactly an end mark.
    pub(crate) fn finish(&mut self) -> Option<Bytes> {
        Some(self.scan.finish()).filter(|out| !out.is_empty())
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
        // The longest end-mark line: the mark, `:`, a status of up to 10 digits, the newline.
        const MAX_MARK_LEN: usize = END_MARK.len() + 12;
        let mut trailer = Trailer::default();
        let prefix = &END_MARK.as_bytes()[..END_MARK.len() - 1];
        let mut passed = 0;
        for _ in 0..10_000 {
            passed += trailer.push(prefix).map_or(0, |b| b.len());
            assert!(
                trailer.scan.held_len() <= MAX_MARK_LEN,
                "{}",
                trailer.scan.held_len()
            );
        }
        assert_eq!(passed + trailer.scan.held_len(), 10_000 * prefix.len());
        let digits = format!("{END_MARK}:{}", "9".repeat(100_000));
        passed = trailer.push(digits.as_bytes()).map_or(0, |b| b.len());
        assert!(passed > 0 && trailer.scan.held_len() <= MAX_MARK_LEN);
    }

    #[test]
    fn end_mark_values_are_recognised_exactly() {
        for (value, partial, whole) in [
            ("", true, true),
            (":", true, false),
            (":12", true, true),
            (":1234567890", true, true),
            (":12345678901", false, false),
            (":1x", false, false),
            ("x", false, false),
        ] {
            let v = value.as_bytes();
            assert_eq!(end_mark_value(v, false), partial, "{value:?}");
            assert_eq!(end_mark_value(v, true), whole, "{value:?}");
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
