//! The `bash` tool's trailer: the script reports the directory the command ended in on a mark
//! line taken off the end of its stdout, `\n__sandbox_mark_KEY:/the/dir\n`.
//!
//! The key is made by the script itself in the sandbox and announced on the first line of
//! stdout, before the command runs (core's [`KEY_PROLOGUE`]); it lives in an unexported shell
//! variable, so it is in no argv or environment a program the command runs could read from
//! `/proc`, and such a program cannot print a trailer that counts. Every trailer line with the
//! key is taken out of the output and the last one counts, so one printed before the script's
//! own cannot override it. Code running in the tool's shell itself (the command line, which the
//! script `eval`s, and scripts it sources) can see the key, but it can move the directory with
//! `cd` anyway. The scanning is core's [`KeyedMarks`], the one reader for such lines.

use crate::result::ToolError;
use sandbox_sdk_core::emulate::{KEY_PROLOGUE, KeyedMarks};
use sandbox_sdk_core::shell::shell_quote;

/// The longest value accepted; a longer "value" was output after all.
const MAX_VALUE: usize = 16 * 1024;

/// Finds and strips the trailer lines in a stdout stream: core's [`KeyedMarks`] on lines of
/// their own, with any value up to [`MAX_VALUE`] bytes.
#[derive(Debug, Clone)]
pub(crate) struct Trailer {
    marks: KeyedMarks,
}

impl Trailer {
    /// A trailer whose key the script will make.
    pub fn new() -> Trailer {
        Trailer {
            marks: KeyedMarks::new(|value, _| value.len() <= MAX_VALUE).on_own_line(),
        }
    }

    /// The script of one `bash` call: make and announce the key, start in `cwd` (saying so on
    /// stderr when it is gone), run `line` in this shell so a `cd` in it counts, then print the
    /// trailer with the directory it ended in and exit with the line's status. Tracing the line
    /// turned on (`set -x`) is turned off first, so the trailer's `printf` is not traced to
    /// stderr with the key.
    pub fn script(&self, line: &str, cwd: Option<&str>) -> Result<String, ToolError> {
        let mut script = format!("{KEY_PROLOGUE}\n");
        if let Some(cwd) = cwd {
            let dir = shell_quote(cwd)?;
            script.push_str(&format!(
                "cd -- {dir} 2>/dev/null || printf 'bash: the working directory %s is gone; starting in %s\\n' {dir} \"$PWD\" >&2\n"
            ));
        }
        script.push_str(&format!("eval {}\n", shell_quote(line)?));
        script.push_str("__sbox_status=$?\n{ set +x; } 2>/dev/null\n");
        script.push_str(&self.marks.mark_line("\"$PWD\""));
        script.push_str("\nexit \"$__sbox_status\"\n");
        Ok(script)
    }

    /// Feeds one chunk; returns the bytes that are certainly output.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.marks.push(chunk).to_vec()
    }

    /// Ends the stream: returns the held-back output (and a trailer that never ended, which
    /// was output after all).
    pub fn finish(&mut self) -> Vec<u8> {
        self.marks.finish().to_vec()
    }

    /// The last trailer's value, once its whole line has come.
    pub fn value(&self) -> Option<String> {
        self.marks
            .value()
            .map(|value| String::from_utf8_lossy(value).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_sdk_core::emulate::{KEY_PREFIX, MARK_PREFIX};

    const KEY: &str = "00112233445566778899aabbccddeeff";

    /// `body` as the script's stdout: the key line first, `@@` standing for a trailer's token.
    fn stream(body: &str) -> Vec<u8> {
        format!(
            "{KEY_PREFIX}{KEY}\n{}",
            body.replace("@@", &format!("{MARK_PREFIX}{KEY}:"))
        )
        .into_bytes()
    }

    /// Feeds `input` split at `cuts` and returns (output, value).
    fn feed(input: &[u8], cuts: &[usize]) -> (Vec<u8>, Option<String>) {
        let mut trailer = Trailer::new();
        let mut out = Vec::new();
        let mut from = 0;
        for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
            out.extend(trailer.push(&input[from..cut]));
            from = cut;
        }
        out.extend(trailer.finish());
        (out, trailer.value())
    }

    /// Every way to split `body`'s stream in two and in three gives the same answer.
    fn at_every_boundary(body: &str, want_out: &str, want: Option<&str>) {
        let input = stream(body);
        let want_out = want_out.replace("@@", &format!("{MARK_PREFIX}{KEY}:"));
        for i in 0..=input.len() {
            for j in i..=input.len() {
                let (out, value) = feed(&input, &[i, j]);
                assert_eq!(String::from_utf8_lossy(&out), want_out, "split at {i}, {j}");
                assert_eq!(value.as_deref(), want, "split at {i}, {j}");
            }
        }
    }

    #[test]
    fn the_trailer_is_taken_off_and_its_value_returned() {
        at_every_boundary("hello\n\n@@/work/src\n", "hello\n", Some("/work/src"));
        // Output without a final newline keeps exactly its bytes.
        at_every_boundary("partial\n@@/tmp\n", "partial", Some("/tmp"));
        at_every_boundary("\n@@/\n", "", Some("/"));
    }

    #[test]
    fn output_like_the_token_stays_output() {
        at_every_boundary("a\n@@", "a\n@@", None);
        // A token with no newline after it was output, not a trailer.
        at_every_boundary("x\n@@/half", "x\n@@/half", None);
    }

    #[test]
    fn bytes_after_the_trailer_line_are_output() {
        at_every_boundary("a\n@@/d\nlate\n", "alate\n", Some("/d"));
    }

    /// A trailer printed before the script's own does not override it.
    #[test]
    fn the_last_trailer_counts() {
        at_every_boundary("a\n@@/first\nb\n@@/last\n", "ab", Some("/last"));
    }

    /// Without the key line first (something printed before the script could), nothing is a
    /// trailer.
    #[test]
    fn without_the_key_line_first_nothing_is_a_trailer() {
        let mut input = b"x".to_vec();
        input.extend(stream("\n@@/d\n"));
        assert_eq!(feed(&input, &[]), (input.clone(), None));
    }

    #[test]
    fn an_overlong_value_is_output() {
        let body = format!("\n@@{}\n", "x".repeat(MAX_VALUE + 1));
        let input = stream(&body);
        let (out, value) = feed(&input, &[]);
        assert_eq!(value, None);
        assert_eq!(out, &input[KEY_PREFIX.len() + KEY.len() + 1..]);
    }

    /// The script under this host's `sh` (the tool runs it under bash where there is one): the
    /// directory comes back through the trailer, the key shows nowhere but in the trailer line
    /// (not in a traced `printf`), and a missing directory is said on stderr.
    #[test]
    fn the_script_reports_its_directory_in_a_real_shell() {
        let dir = std::env::temp_dir();
        for shell in ["sh", "bash"] {
            if std::process::Command::new(shell)
                .args(["-c", "true"])
                .status()
                .is_err()
            {
                continue;
            }
            let trailer = Trailer::new();
            let script = trailer
                .script(
                    "set -x; cd / && printf 'out'; exit_code=4; (exit $exit_code)",
                    Some("/nonexistent-dir"),
                )
                .unwrap();
            let out = std::process::Command::new(shell)
                .args(["-c", &script])
                .current_dir(&dir)
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(4), "{shell}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("/nonexistent-dir is gone"),
                "{shell}: {stderr}"
            );
            let stdout = String::from_utf8_lossy(&out.stdout);
            let key = &stdout[KEY_PREFIX.len()..KEY_PREFIX.len() + KEY.len()];
            assert!(
                !stderr.contains(key),
                "{shell}: the key was traced: {stderr}"
            );
            let (got, value) = feed(&out.stdout, &[]);
            assert_eq!(
                (String::from_utf8_lossy(&got).as_ref(), value.as_deref()),
                ("out", Some("/")),
                "{shell}: {stdout:?}"
            );
        }
    }
}
