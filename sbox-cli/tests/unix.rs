//! `sbox` as a Unix tool, run as a process: `ls` of `local` shows what an earlier
//! `sbox create` made.

use std::path::Path;
use std::process::{Command, Output, Stdio};

fn sbox_command(root: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sbox"));
    command
        .args(args)
        .env("SBOX_LOCAL_ROOT", root.join("root"))
        // A panic would print its backtrace: the test looks for it.
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null());
    command
}

fn sbox(root: &Path, args: &[&str]) -> Output {
    sbox_command(root, args).output().unwrap()
}

fn create(root: &Path) -> String {
    let out = sbox(root, &["create", "-p", "local"]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
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
