//! Quoting for POSIX `sh`, and the script builder that folds a [`Command`]'s cwd and env into
//! `sh -c SCRIPT` for providers that take only one command line (or no per-command cwd/env).
//!
//! Every word is put in single quotes, inside which `sh` gives no character a special meaning;
//! a single quote itself is written as `'\''` (close, escaped quote, reopen). The only byte that
//! cannot travel this way is NUL, which no C string can hold: it is rejected with
//! [`ErrorKind::Validation`](crate::ErrorKind::Validation).

use crate::error::{Error, Result};
use crate::exec::{Command, validate_env_name};

/// Quotes `word` for POSIX `sh` so that it reaches the program byte for byte.
///
/// ```
/// use sandbox_sdk_core::shell::shell_quote;
/// assert_eq!(shell_quote("it's $HOME").unwrap(), r#"'it'\''s $HOME'"#);
/// assert!(shell_quote("a\0b").is_err());
/// ```
pub fn shell_quote(word: &str) -> Result<String> {
    if word.contains('\0') {
        return Err(Error::validation(
            "cannot pass a NUL byte through a shell command line",
        ));
    }
    let mut out = String::with_capacity(word.len() + 2);
    out.push('\'');
    for c in word.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    Ok(out)
}

/// Quotes every word of `argv` and joins them with spaces.
pub fn quote_argv(argv: &[String]) -> Result<String> {
    let words = argv
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Result<Vec<_>>>()?;
    Ok(words.join(" "))
}

/// The `sh` script that runs `command` with its cwd and env applied:
/// `cd -- 'CWD' && export K='V' && exec 'prog' 'arg'...`.
///
/// A relative cwd is written as `./CWD`, so `CDPATH` is never consulted and a name starting with
/// `-` is not taken for an option. The command is validated first (empty argv, NUL bytes, env
/// names). Run the result as `["sh", "-c", script]` with no cwd or env of its own.
///
/// ```
/// use sandbox_sdk_core::{Command, shell::shell_script};
/// let cmd = Command::new("echo").arg("a b").cwd("/tmp").env("K", "v'1");
/// assert_eq!(
///     shell_script(&cmd).unwrap(),
///     r#"cd -- '/tmp' && export K='v'\''1' && exec 'echo' 'a b'"#
/// );
/// ```
pub fn shell_script(command: &Command) -> Result<String> {
    build_script(command, true, true)
}

/// Builds the script; `fold` applies cwd and env in the script, `exec` replaces the shell with the
/// program (left out when something must run after it, such as an exit-code marker).
pub(crate) fn build_script(command: &Command, fold: bool, exec: bool) -> Result<String> {
    command.validate()?;
    let mut parts = Vec::new();
    if fold {
        if let Some(cwd) = &command.cwd {
            let target = if cwd.starts_with('/') {
                cwd.clone()
            } else {
                format!("./{cwd}")
            };
            parts.push(format!("cd -- {}", shell_quote(&target)?));
        }
        for (key, value) in &command.env {
            validate_env_name(key)?;
            parts.push(format!("export {key}={}", shell_quote(value)?));
        }
    }
    let argv = quote_argv(&command.argv)?;
    // bash takes `exec -x` for an option of exec (and dash refuses `exec --`), so a program
    // whose name starts with `-` runs as a plain command instead.
    let exec = exec && !command.argv[0].starts_with('-');
    parts.push(if exec { format!("exec {argv}") } else { argv });
    Ok(parts.join(" && "))
}

/// A copy of `command` whose cwd and env are folded into `argv = ["sh", "-c", script]`.
pub fn fold_into_shell(command: &Command) -> Result<Command> {
    let script = shell_script(command)?;
    let mut folded = command.clone();
    folded.argv = vec!["sh".into(), "-c".into(), script];
    // The script is ours and POSIX sh; it is not the caller's shell line.
    folded.shell = false;
    folded.secret_args |= !command.env.is_empty();
    folded.cwd = None;
    folded.env.clear();
    Ok(folded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn relative_cwd_is_prefixed_and_bad_env_names_rejected() {
        let cmd = Command::new("ls").cwd("-rf");
        assert_eq!(shell_script(&cmd).unwrap(), "cd -- './-rf' && exec 'ls'");
        let bad = Command::new("ls").env("A B", "x");
        assert_eq!(
            shell_script(&bad).unwrap_err().kind(),
            ErrorKind::Validation
        );
        let nul = Command::new("ls").env("A", "x\0");
        assert_eq!(
            shell_script(&nul).unwrap_err().kind(),
            ErrorKind::Validation
        );
    }

    #[test]
    fn a_program_named_like_an_option_is_run_not_parsed() {
        let script = shell_script(&Command::new("-l").arg("x")).unwrap();
        assert_eq!(script, "'-l' 'x'");
        for shell in ["sh", "bash", "dash"] {
            let Ok(out) = std::process::Command::new(shell)
                .args(["-c", &script])
                .output()
            else {
                continue;
            };
            let stderr = String::from_utf8_lossy(&out.stderr);
            // The shell looked `-l` up as a program; it did not take it for an option of exec.
            assert!(
                stderr.contains("-l") && stderr.contains("not found"),
                "{shell}: {stderr}"
            );
        }
    }

    #[test]
    fn fold_clears_cwd_and_env() {
        let folded = fold_into_shell(&Command::new("pwd").cwd("/").env("A", "1")).unwrap();
        assert_eq!(folded.argv[..2], ["sh", "-c"]);
        assert!(folded.cwd.is_none() && folded.env.is_empty());
    }
}
