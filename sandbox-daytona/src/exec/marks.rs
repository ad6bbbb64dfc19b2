//! The shell line a command becomes in a session, and the end marks that make its output exact
//! (PROTOCOL.md §8.1): [`command_line`], [`Trailers`], and how a command's end is reported
//! ([`exit_event`]).
//!
//! The end marks are core's keyed marks ([`KeyedMarks`], [`KeyedEnd`]), not its
//! [`ExitMarker`](sandbox_sdk_core::emulate::ExitMarker): they do another job. The exit code is
//! native (the daemon's `exitCode`); the marks are on both streams, to take back the newline
//! the daemon's line reader adds to a last partial line of each, they count only at the very
//! end of a stream, and the follower must see that both are complete *while the stream is
//! open*, to end as soon as the command does instead of waiting for the server's close
//! (PROTOCOL.md §8.2).
//!
//! A mark the follower ends on must be one the line printed, not one a program the command
//! runs printed before going on (issue 23: a fixed mark let any program end the follow early,
//! with the status it chose, and hand the session back to the pool while it still ran). So the
//! line first makes a key in the sandbox from `/dev/urandom` into an unexported shell variable
//! (core's [`KEY_PROLOGUE`]: in no argv or environment, so no program can read it from
//! `/proc`) and announces it as stdout's first line; both marks carry it and are printed by the
//! shell's builtin `printf`. Stdout's key line is taken out, stdout's mark counts only with that
//! key, and stderr's (whose key is read before stdout's line may have come) only once it is
//! known to be the same.
//!
//! When the sandbox cannot make a key (no `od` or `/dev/urandom`), the first line says so
//! instead (core's [`NO_KEY`](sandbox_sdk_core::emulate::NO_KEY) line, taken out), the marks
//! print nothing, and no mark is trusted: the output is passed on as the daemon logged it (a
//! last partial line of each stream gains a newline), the follow ends with the log stream, and
//! the exit code is the daemon's (`GET …/command/{cid}`, or the synchronous answer's
//! `exitCode`).

use crate::config::PROVIDER;
use bytes::Bytes;
use sandbox_sdk_core::emulate::{KEY_PROLOGUE, KeyedEnd, KeyedMarks, fold_env_cwd};
use sandbox_sdk_core::shell::quote_argv;
use sandbox_sdk_core::{Command, Error, ErrorKind, ExitStatus, ProcessEvent, Result};
use std::time::Duration;
use tokio::time::Instant;

/// Exit status reported for a command killed through
/// [`ProcessControl::kill`](sandbox_sdk_core::ProcessControl::kill) or
/// `kill_process` (the session's shell gets SIGKILL).
pub(crate) const SIGKILL: i32 = 9;

/// The statuses coreutils `timeout` ends with when it stopped the command: 124 after SIGTERM,
/// 137 when the grace (`-k 5`) ran out and it sent SIGKILL.
const TIMEOUT_STATUSES: [i32; 2] = [124, 137];

/// The shell line a [`Command`] becomes: a subshell of the session's shell (a fork, not a new
/// shell; `cd`, exports, `exit` and the key stay inside it) running the quoted argv (cwd and
/// env folded into `sh -c` first by core's one folding, [`fold_env_cwd`]: a session command
/// takes neither, PROTOCOL.md §6.2), wrapped in coreutils `timeout` when the command has a
/// process timeout. It starts with the no-op `: sdk-cmd-{label}`, which makes the line unique
/// within its session so a command still running after the direct window can be found by its
/// text.
///
/// Then core's [`KEY_PROLOGUE`] makes the key and prints it as stdout's first line (see the
/// module docs). The daemon's session wrapper reads each stream line by line and ends every
/// line with `\n`, so a last line without one would gain a newline. To give back the exact
/// bytes, the line ends by printing the end marks after the command: `__sandbox_mark_KEY:status`
/// on stdout and `__sandbox_mark_KEY:` on stderr, each with a newline, then exits with the
/// command's status. The follower strips exactly those suffixes (and the key line), and once
/// both are seen it knows the output is complete and the exit status without asking the daemon.
/// Output that lacks them (a killed command, a command started elsewhere, a sandbox that could
/// not make a key) is passed on unchanged.
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
        "(: sdk-cmd-{label}; {KEY_PROLOGUE}; {inner}; s=$?; {}; {} >&2; exit $s)",
        stdout_marks().mark_line("\"$s\""),
        KeyedEnd::mark_line(),
    ))
}

/// Stdout's reader: the key line, then the mark with the status, at the end only.
fn stdout_marks() -> KeyedMarks {
    KeyedMarks::new(status_value).at_end()
}

/// Stdout's mark value: the status, up to 10 digits.
fn status_value(value: &[u8], whole: bool) -> bool {
    value.len() <= 10 && value.iter().all(u8::is_ascii_digit) && !(whole && value.is_empty())
}

/// Both streams' end marks, read by core's keyed readers: output is passed on as soon as it
/// cannot be part of a key line or of a mark line that ends its stream.
pub(crate) struct Trailers {
    out: KeyedMarks,
    err: KeyedEnd,
}

impl Default for Trailers {
    fn default() -> Self {
        Trailers {
            out: stdout_marks(),
            err: KeyedEnd::new(),
        }
    }
}

impl Trailers {
    /// Appends `data` to stdout; returns what can be passed on now.
    pub(crate) fn stdout(&mut self, data: &[u8]) -> Option<Bytes> {
        Some(self.out.push(data)).filter(|out| !out.is_empty())
    }

    /// Appends `data` to stderr; returns what can be passed on now.
    pub(crate) fn stderr(&mut self, data: &[u8]) -> Option<Bytes> {
        Some(self.err.push(data)).filter(|out| !out.is_empty())
    }

    /// The status stdout's mark carries, once both streams end in a mark with the key stdout
    /// announced: the output is then complete.
    pub(crate) fn status(&self) -> Option<i32> {
        let key = self.out.key()?;
        if self.err.key()? != key {
            return None;
        }
        std::str::from_utf8(self.out.value()?).ok()?.parse().ok()
    }

    /// The rest of both streams (stdout's, stderr's): nothing when each is exactly its mark.
    pub(crate) fn finish(&mut self) -> (Option<Bytes>, Option<Bytes>) {
        let out = self.out.finish();
        let err = self.err.finish(self.out.key());
        (
            Some(out).filter(|b| !b.is_empty()),
            Some(err).filter(|b| !b.is_empty()),
        )
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
    use sandbox_sdk_core::emulate::{KEY_HEX, KEY_PREFIX, MARK_PREFIX, NO_KEY};
    use sandbox_sdk_core::shell::shell_quote;

    /// A key as the sandbox would make it.
    const KEY: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn command_lines_quote_and_fold_cwd_env_and_timeout() {
        assert_eq!(
            command_line(&Command::shell("exit 3"), 7).unwrap(),
            format!(
                "(: sdk-cmd-7; {KEY_PROLOGUE}; (exit 3\n); s=$?; \
                 [ -z \"$__sandbox_k\" ] || printf '__sandbox_mark_%s:%s\\n' \"$__sandbox_k\" \"$s\"; \
                 [ -z \"$__sandbox_k\" ] || printf '__sandbox_mark_%s:%s\\n' \"$__sandbox_k\" '' >&2; \
                 exit $s)"
            )
        );
        assert!(
            command_line(
                &Command::new("sleep")
                    .arg("9")
                    .timeout(Duration::from_millis(1500)),
                2
            )
            .unwrap()
            .contains("; timeout -k 5 2 'sleep' '9'; s=$?;")
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

    /// Feeds both streams whole in chunks of `chunk` bytes, stderr first (its mark is read
    /// before stdout's key line): (stdout, stderr, the status the marks gave at the end).
    fn read_both(stdout: &[u8], stderr: &[u8], chunk: usize) -> (String, String, Option<i32>) {
        let mut trailers = Trailers::default();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        for piece in stderr.chunks(chunk) {
            err.extend(trailers.stderr(piece).unwrap_or_default());
        }
        for piece in stdout.chunks(chunk) {
            out.extend(trailers.stdout(piece).unwrap_or_default());
        }
        let status = trailers.status();
        let (out_rest, err_rest) = trailers.finish();
        out.extend(out_rest.unwrap_or_default());
        err.extend(err_rest.unwrap_or_default());
        (
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
            status,
        )
    }

    #[test]
    fn the_end_marks_restore_exact_output_and_keep_the_exit_code() {
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
            // The key line comes first, and the key is in both marks.
            let stdout = String::from_utf8(result.stdout.clone()).unwrap();
            let key = &stdout[KEY_PREFIX.len()..KEY_PREFIX.len() + KEY_HEX];
            assert!(stdout.starts_with(KEY_PREFIX), "{stdout:?}");
            assert!(stdout.ends_with(&format!("{MARK_PREFIX}{key}:{code}\n")));
            assert_eq!(
                String::from_utf8_lossy(&result.stderr),
                format!("{err}{MARK_PREFIX}{key}:\n")
            );
            // What the daemon's line wrapper would log, then what the follower gives back.
            for chunk in [1, 3, 1000] {
                assert_eq!(
                    read_both(&result.stdout, &result.stderr, chunk),
                    (out.to_owned(), err.to_owned(), Some(code)),
                    "{script}"
                );
            }
        }
    }

    /// What the follower makes of a command's streams as the daemon logs them, line by line
    /// and the two streams interleaved: it checks for both end marks after every line and ends
    /// at the first status they give, passing on what it holds back. Returns (stdout, stderr,
    /// that status).
    fn follow(stdout: &[u8], stderr: &[u8]) -> (Vec<u8>, Vec<u8>, Option<i32>) {
        let mut trailers = Trailers::default();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut out_lines = stdout.split_inclusive(|b| *b == b'\n');
        let mut err_lines = stderr.split_inclusive(|b| *b == b'\n');
        let mut status = None;
        loop {
            let (o, e) = (out_lines.next(), err_lines.next());
            if o.is_none() && e.is_none() {
                break;
            }
            out.extend(o.and_then(|line| trailers.stdout(line)).unwrap_or_default());
            err.extend(e.and_then(|line| trailers.stderr(line)).unwrap_or_default());
            if let Some(code) = trailers.status() {
                status = Some(code);
                break;
            }
        }
        let (out_rest, err_rest) = trailers.finish();
        out.extend(out_rest.unwrap_or_default());
        err.extend(err_rest.unwrap_or_default());
        (out, err, status)
    }

    /// Issue 23: a program the command runs prints end marks of its own on both streams (the
    /// fixed text they used to be, and keyed ones with a guessed key after a late key line),
    /// then the command goes on and exits 3. The follower must not end on the forged marks
    /// (reporting exit 0 and handing the session back while the command runs): the status is
    /// the command's, at its real end, and the forged lines are output.
    #[test]
    fn a_program_cannot_forge_the_end_marks() {
        let guess = "0".repeat(32);
        let forged_out = format!(
            "__sandbox_sdk_end_of_output__:0\n__sandbox_key_{guess}\n__sandbox_mark_{guess}:0\n"
        );
        let forged_err = format!("__sandbox_sdk_end_of_output__\n__sandbox_mark_{guess}:\n");
        let program = format!(
            "printf '%s' {}; printf '%s' {} >&2",
            shell_quote(&forged_out).unwrap(),
            shell_quote(&forged_err).unwrap(),
        );
        let script = format!(
            "sh -c {}; echo after; echo late >&2; exit 3",
            shell_quote(&program).unwrap()
        );
        let result = run_line(
            &command_line(&Command::shell(script), 1).unwrap(),
            &std::env::temp_dir(),
        );
        assert_eq!(result.status.code(), Some(3));
        let (out, err, status) = follow(&result.stdout, &result.stderr);
        assert_eq!(status, Some(3), "ended on a forged mark");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("{forged_out}after\n")
        );
        assert_eq!(
            String::from_utf8(err).unwrap(),
            format!("{forged_err}late\n")
        );
    }

    /// Without `od` (a `PATH` with nothing in it) the sandbox makes no key: the line says so
    /// first, prints no marks, and a key line and marks a program prints are output, never an
    /// end: the status is left to the daemon.
    #[test]
    fn without_a_key_no_mark_is_trusted() {
        let forged_out = format!("{KEY_PREFIX}{KEY}\n{MARK_PREFIX}{KEY}:0\n");
        let forged_err = format!("{MARK_PREFIX}{KEY}:\n");
        let program = format!(
            "printf '%s' {}; printf '%s' {} >&2",
            shell_quote(&forged_out).unwrap(),
            shell_quote(&forged_err).unwrap(),
        );
        let script = format!(
            "/bin/sh -c {}; printf more; exit 3",
            shell_quote(&program).unwrap()
        );
        let line = command_line(&Command::shell(script), 1).unwrap();
        let result = std::process::Command::new("/bin/sh")
            .args(["-c", &line])
            .env("PATH", "/nonexistent")
            .output()
            .unwrap();
        assert_eq!(result.status.code(), Some(3));
        assert_eq!(
            String::from_utf8_lossy(&result.stdout),
            format!("{KEY_PREFIX}{NO_KEY}\n{forged_out}more")
        );
        assert_eq!(String::from_utf8_lossy(&result.stderr), forged_err);
        let (out, err, status) = follow(&result.stdout, &result.stderr);
        assert_eq!(status, None);
        assert_eq!(String::from_utf8(out).unwrap(), format!("{forged_out}more"));
        assert_eq!(String::from_utf8(err).unwrap(), forged_err);
    }

    /// Stderr's mark counts only with stdout's key, and only at the end; a mark a program
    /// printed with another key is output.
    #[test]
    fn the_stderr_mark_needs_the_key_stdout_announced() {
        let key_line = format!("{KEY_PREFIX}{KEY}\n");
        let out_mark = format!("out{MARK_PREFIX}{KEY}:4\n");
        let other = "f".repeat(KEY_HEX);
        let mut trailers = Trailers::default();
        // Stderr's mark before stdout's key line: held, but no end yet.
        assert_eq!(
            trailers.stderr(format!("e\n{MARK_PREFIX}{KEY}:\n").as_bytes()),
            Some("e\n".into())
        );
        assert_eq!(trailers.stdout(key_line.as_bytes()), None);
        assert_eq!(trailers.status(), None);
        assert_eq!(trailers.stdout(out_mark.as_bytes()), Some("out".into()));
        assert_eq!(trailers.status(), Some(4));
        // More stderr after the mark: it was output, and the end is not reached.
        let late = format!("{MARK_PREFIX}{other}:\n");
        assert_eq!(
            trailers.stderr(late.as_bytes()),
            Some(format!("{MARK_PREFIX}{KEY}:\n").into())
        );
        assert_eq!(trailers.status(), None);
        assert_eq!(trailers.finish(), (None, Some(late.into())));
        // A stdout mark with another key is output.
        let mut trailers = Trailers::default();
        trailers.stdout(key_line.as_bytes());
        trailers.stderr(format!("{MARK_PREFIX}{KEY}:\n").as_bytes());
        let forged = format!("{MARK_PREFIX}{other}:0\n");
        assert_eq!(
            trailers.stdout(forged.as_bytes()),
            Some(forged.clone().into())
        );
        assert_eq!(trailers.status(), None);
        assert_eq!(trailers.finish(), (None, None));
    }

    #[test]
    fn a_stream_without_the_end_mark_is_passed_on_whole() {
        let killed = b"partial output of a killed command";
        assert_eq!(
            read_both(killed, b"", 5),
            (
                String::from_utf8_lossy(killed).into_owned(),
                String::new(),
                None
            )
        );
        // After the key line, a mark the command printed itself, followed by more output, is
        // output.
        let stdout = format!("{KEY_PREFIX}{KEY}\n{MARK_PREFIX}{KEY}:3\nmore\n");
        assert_eq!(
            read_both(stdout.as_bytes(), b"", 4),
            (format!("{MARK_PREFIX}{KEY}:3\nmore\n"), String::new(), None)
        );
    }

    /// A hostile output made of endless end-mark beginnings (never a whole line) cannot make
    /// the trailers hold more than one mark line beyond the chunk just pushed: it is passed on.
    #[test]
    fn the_held_tail_stays_within_one_mark_line() {
        // The longest end-mark line: the prefix, the key, `:`, a status of up to 10 digits,
        // the newline.
        const MAX_MARK_LEN: usize = MARK_PREFIX.len() + KEY_HEX + 12;
        let mut out = stdout_marks();
        out.push(format!("{KEY_PREFIX}{KEY}\n").as_bytes());
        let mut err = KeyedEnd::new();
        let token = format!("{MARK_PREFIX}{KEY}:");
        let prefix = &token.as_bytes()[..token.len() - 1];
        let mut passed = (0, 0);
        for _ in 0..10_000 {
            passed.0 += out.push(prefix).len();
            passed.1 += err.push(prefix).len();
            assert!(out.held_len() <= MAX_MARK_LEN, "{}", out.held_len());
            assert!(err.held_len() <= MAX_MARK_LEN, "{}", err.held_len());
        }
        assert_eq!(passed.0 + out.held_len(), 10_000 * prefix.len());
        assert_eq!(passed.1 + err.held_len(), 10_000 * prefix.len());
        let digits = format!("{token}{}", "9".repeat(100_000));
        assert!(!out.push(digits.as_bytes()).is_empty() && out.held_len() <= MAX_MARK_LEN);
        assert!(!err.push(digits.as_bytes()).is_empty() && err.held_len() <= MAX_MARK_LEN);
    }

    #[test]
    fn status_values_are_recognised_exactly() {
        for (value, partial, whole) in [
            ("", true, false),
            ("12", true, true),
            ("1234567890", true, true),
            ("12345678901", false, false),
            ("1x", false, false),
            (":1", false, false),
        ] {
            let v = value.as_bytes();
            assert_eq!(status_value(v, false), partial, "{value:?}");
            assert_eq!(status_value(v, true), whole, "{value:?}");
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
                read_both(&out.stdout, &out.stderr, 7),
                (
                    "it's a $HOME \"test\"|conformance-cwd".to_owned(),
                    String::new(),
                    Some(0)
                ),
                "timeout {timeout:?}"
            );
            assert!(out.status.success());
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
