//! `sbox` as a Unix tool, run as a process: a reader that goes away (`sbox ls | head -1`) ends
//! every command quietly with status 141, `ls` of `local` shows what an earlier `sbox create`
//! made, and the help names every provider of the registry.

mod run;

use run::{create, sbox, sbox_command, stderr, stdout};
use std::path::Path;
use std::process::{Output, Stdio};

/// What sbox exits with when its standard output is closed: 128 + SIGPIPE, as a shell reports
/// a command that SIGPIPE ended.
const CLOSED_STDOUT: i32 = 141;

/// `sbox` with its standard output a pipe whose reader has already gone, as in
/// `sbox ... | head -0`: every write to it fails with `EPIPE`, with no race against the reader.
fn sbox_to_closed_pipe(root: &Path, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    sbox_command(root, args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn a_closed_stdout_ends_every_command_quietly_with_status_141() {
    let dir = tempfile::tempdir().unwrap();
    let id = create(dir.path());
    let id = id.as_str();
    let commands: &[&[&str]] = &[
        &["caps", "-p", "vercel"],
        &["caps", "-p", "local"],
        &["create", "-p", "local"],
        &["ls", "-p", "local"],
        &["exec", "-p", "local", id, "--", "echo", "hi"],
        // Output that never ends: sbox stops the command and exits.
        &[
            "exec",
            "-p",
            "local",
            id,
            "--",
            "sh",
            "-c",
            "while :; do echo y; done",
        ],
        &["code", "-p", "local", id, "-c", "print(1)"],
        &["code", "-p", "local", id, "-c", "6 * 7"],
        &["preview", "-p", "local", id, "8080"],
        &["reap", "-p", "local", "--dry-run", "--max-age", "1d"],
        &["shapes", "-p", "e2b"],
        &["usage", "-p", "local"],
        &["mcp", "-p", "local", "--http", "127.0.0.1:0", "--no-auth"],
        &["--help"],
        &["--version"],
        &["ls", "--help"],
    ];
    let mut failures = Vec::new();
    for args in commands {
        let out = sbox_to_closed_pipe(dir.path(), args);
        let err = stderr(&out);
        if err.contains("panicked") || err.contains("backtrace") || err.contains("Broken pipe") {
            failures.push(format!("sbox {args:?} was not quiet:\n{err}"));
        } else if out.status.code() != Some(CLOSED_STDOUT) {
            failures.push(format!("sbox {args:?} ended with {}: {err}", out.status));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn an_mcp_server_on_stdio_whose_client_closed_stdout_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = sbox_command(dir.path(), &["mcp", "-p", "local"])
        .stdin(Stdio::piped())
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{initialize}").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("Broken pipe"), "{err}");
    assert_eq!(out.status.code(), Some(CLOSED_STDOUT), "{err}");
}

#[test]
fn ls_of_local_shows_what_an_earlier_create_made_until_rm() {
    let dir = tempfile::tempdir().unwrap();
    let first = create(dir.path());
    let second = create(dir.path());
    let out = sbox(dir.path(), &["ls", "-p", "local"]);
    assert!(out.status.success(), "{out:?}");
    let listed = stdout(&out);
    for id in [&first, &second] {
        assert!(
            listed
                .lines()
                .any(|l| l.starts_with(&format!("{id}\trunning\t"))),
            "ls does not show {id}:\n{listed}"
        );
    }
    assert_eq!(listed.lines().count(), 2, "{listed}");

    let out = sbox(dir.path(), &["rm", "-p", "local", &first]);
    assert!(out.status.success(), "{out:?}");
    let listed = stdout(&sbox(dir.path(), &["ls", "-p", "local"]));
    assert!(!listed.contains(&first), "{listed}");
    assert!(listed.contains(&second), "{listed}");
}

#[test]
fn ls_of_local_before_any_create_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let out = sbox(dir.path(), &["ls", "-p", "local"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out), "");
}

#[test]
fn help_names_every_provider_of_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let all = sandbox_sdk::ALL_PROVIDERS.join(", ");
    let top = stdout(&sbox(dir.path(), &["--help"]));
    assert!(
        top.contains(&all),
        "sbox --help does not name {all}:\n{top}"
    );
    for command in [
        "caps", "create", "ls", "exec", "code", "cp", "rm", "preview", "reap", "shapes", "usage",
        "mcp",
    ] {
        let help = stdout(&sbox(dir.path(), &[command, "--help"]));
        assert!(
            help.contains(&all),
            "sbox {command} --help does not name {all}:\n{help}"
        );
    }
}
