//! `sbox` against the `local` provider, run as a process: create, exec (live output, exit
//! code), cp both ways, rm, and the errors a user sees.

mod run;

use run::{create, sbox, stderr, stdout};
use std::path::Path;
use std::process::{Command, Output};

#[test]
fn exec_passes_output_through_and_exits_with_the_commands_code() {
    let dir = tempfile::tempdir().unwrap();
    let id = create(dir.path());
    let out = sbox(
        dir.path(),
        &[
            "exec",
            "--provider",
            "local",
            &id,
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 7",
        ],
    );
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    assert_eq!(stdout(&out), "out\n");
    assert_eq!(stderr(&out), "err\n");

    let out = sbox(
        dir.path(),
        &["exec", "--provider", "local", &id, "--", "true"],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    let out = sbox(
        dir.path(),
        &[
            "exec",
            "--provider",
            "local",
            &id,
            "--",
            "sh",
            "-c",
            "kill -9 $$",
        ],
    );
    assert_eq!(out.status.code(), Some(128 + 9), "{out:?}");
}

#[test]
fn cp_uploads_and_downloads_and_exec_sees_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let id = create(dir.path());
    let src = dir.path().join("in.bin");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&src, &data).unwrap();

    let up = format!("{id}:data/in.bin");
    let out = sbox(
        dir.path(),
        &["exec", "--provider", "local", &id, "--", "mkdir", "data"],
    );
    assert!(out.status.success(), "{out:?}");
    let out = sbox(
        dir.path(),
        &["cp", "--provider", "local", src.to_str().unwrap(), &up],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(stderr(&out).contains("copied 300000 bytes"), "{out:?}");

    let out = sbox(
        dir.path(),
        &[
            "exec",
            "--provider",
            "local",
            &id,
            "--",
            "wc",
            "-c",
            "data/in.bin",
        ],
    );
    assert_eq!(
        stdout(&out).split_whitespace().next(),
        Some("300000"),
        "{out:?}"
    );

    let back = dir.path().join("back.bin");
    let out = sbox(
        dir.path(),
        &["cp", "--provider", "local", &up, back.to_str().unwrap()],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::read(&back).unwrap(), data);

    let missing = format!("{id}:nope.txt");
    let dest = dir.path().join("nope.txt");
    let out = sbox(
        dir.path(),
        &[
            "cp",
            "--provider",
            "local",
            &missing,
            dest.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("not found"), "{out:?}");
    assert!(!dest.exists());
    assert_eq!(partials(dir.path()), Vec::<String>::new());

    let out = sbox(dir.path(), &["cp", "--provider", "local", "a", "b"]);
    assert!(
        stderr(&out).contains("neither side is in a sandbox"),
        "{out:?}"
    );
}

/// The names in `dir` of partial downloads left behind.
fn partials(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("sbox-partial"))
        .collect()
}

#[cfg(unix)]
#[test]
fn a_download_never_writes_through_a_planted_partial_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let id = create(dir.path());
    let src = dir.path().join("in.txt");
    std::fs::write(&src, "from the sandbox\n").unwrap();
    let remote = format!("{id}:in.txt");
    let out = sbox(
        dir.path(),
        &["cp", "--provider", "local", src.to_str().unwrap(), &remote],
    );
    assert!(out.status.success(), "{out:?}");

    // Another local user plants the old partial name as a link to a file of ours.
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "keep me\n").unwrap();
    let dest = dir.path().join("out.txt");
    std::os::unix::fs::symlink(&victim, dir.path().join("out.txt.sbox-partial")).unwrap();

    let out = sbox(
        dir.path(),
        &["cp", "--provider", "local", &remote, dest.to_str().unwrap()],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    assert_eq!(
        std::fs::read_to_string(&dest).unwrap(),
        "from the sandbox\n"
    );
    assert!(!dest.symlink_metadata().unwrap().file_type().is_symlink());
    // Only the planted link is left; our own partial file was renamed into place.
    assert_eq!(partials(dir.path()), ["out.txt.sbox-partial"]);
}

#[test]
fn errors_escape_control_characters_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let id = create(dir.path());
    let remote = format!("{id}:x");
    let out = sbox(
        dir.path(),
        &["cp", "--provider", "local", "\u{1b}[2Jmissing", &remote],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let shown = stderr(&out);
    assert!(shown.contains(r"cannot open \u{1b}[2Jmissing"), "{shown:?}");
    assert!(!shown.contains('\u{1b}'), "{shown:?}");
}

#[test]
fn rm_destroys_and_later_commands_say_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let id = create(dir.path());
    let out = sbox(dir.path(), &["rm", "--provider", "local", &id]);
    assert!(out.status.success(), "{out:?}");
    assert!(!dir.path().join("root").join(&id).exists());
    let out = sbox(
        dir.path(),
        &["exec", "--provider", "local", &id, "--", "true"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not found"), "{out:?}");
}

#[test]
fn ids_that_are_not_sandbox_ids_are_not_found() {
    let dir = tempfile::tempdir().unwrap();
    create(dir.path());
    for id in ["..", "../x", "not-a-uuid"] {
        let out = sbox(
            dir.path(),
            &["exec", "--provider", "local", id, "--", "true"],
        );
        assert_eq!(out.status.code(), Some(1), "{id}: {out:?}");
        assert!(stderr(&out).contains("not found"), "{id}: {out:?}");
    }
}

#[test]
fn caps_and_unknown_providers() {
    let dir = tempfile::tempdir().unwrap();
    let out = sbox(dir.path(), &["caps", "--provider", "local"]);
    assert!(out.status.success(), "{out:?}");
    let caps: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(caps["files_upload"], "native");

    let out = Command::new(env!("CARGO_BIN_EXE_sbox"))
        .args(["caps", "--provider", "e2b"])
        .env_remove("E2B_API_KEY")
        .output()
        .unwrap();
    assert!(out.status.success(), "caps needs no credentials: {out:?}");

    let out = sbox(dir.path(), &["caps", "--provider", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out)
            .contains("no provider named \"nope\": known providers are local, e2b, daytona, fly"),
        "{out:?}"
    );
}

#[test]
fn interrupting_exec_kills_the_command_and_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let id = create(dir.path());
    let marker = dir.path().join("root").join(&id).join("work/still-running");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sbox"))
        .args(["exec", "--provider", "local", &id, "--", "sh", "-c"])
        .arg("echo started; sleep 3; touch still-running")
        .env("SBOX_LOCAL_ROOT", dir.path().join("root"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the command runs, then send SIGINT as a terminal's Ctrl-C would.
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 8];
    std::io::Read::read_exact(&mut stdout, &mut first).unwrap();
    assert_eq!(&first, b"started\n");
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    assert!(stderr(&out).contains("interrupted"), "{out:?}");
    std::thread::sleep(std::time::Duration::from_secs(4));
    assert!(!marker.exists(), "the command went on after the interrupt");
}

#[test]
fn large_copies_show_progress_only_when_asked_or_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let id = create(dir.path());
    let src = dir.path().join("big.bin");
    std::fs::write(&src, vec![1u8; 5 * 1024 * 1024]).unwrap();
    let remote = format!("{id}:big.bin");

    // Not a terminal: no progress line.
    let out = sbox(
        dir.path(),
        &["cp", "--provider", "local", src.to_str().unwrap(), &remote],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(!stderr(&out).contains('\r'), "{out:?}");

    let out = Command::new(env!("CARGO_BIN_EXE_sbox"))
        .args(["cp", "--provider", "local", src.to_str().unwrap(), &remote])
        .env("SBOX_LOCAL_ROOT", dir.path().join("root"))
        .env("SBOX_PROGRESS", "always")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = stderr(&out);
    assert!(err.contains("5.0 MiB / 5.0 MiB  100%"), "{err}");

    let back = dir.path().join("back.bin");
    let out = Command::new(env!("CARGO_BIN_EXE_sbox"))
        .args(["cp", "--provider", "local", &remote, back.to_str().unwrap()])
        .env("SBOX_LOCAL_ROOT", dir.path().join("root"))
        .env("SBOX_PROGRESS", "always")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        stderr(&out).contains(&format!("{id}:big.bin  5.0 MiB")),
        "{out:?}"
    );
    assert_eq!(std::fs::metadata(&back).unwrap().len(), 5 * 1024 * 1024);
}

#[test]
fn shapes_prints_the_ladder_within_the_documented_limits_with_its_prices() {
    let dir = tempfile::tempdir().unwrap();
    let out = sbox(dir.path(), &["shapes", "--provider", "e2b"]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.starts_with("shapes of e2b: limits from its documentation; USD as of "),
        "{text}"
    );
    assert!(
        text.contains("2x4                 10 (10..20)  $0.1656      $0.0000"),
        "{text}"
    );
    assert!(
        !text.contains("8x16"),
        "E2B's documented limit is 8 GiB: {text}"
    );

    // local has no prices until the caller gives some.
    let out = sbox(dir.path(), &["shapes", "--provider", "local"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no prices for \"local\""), "{out:?}");
    let prices = dir.path().join("prices.json");
    std::fs::write(
        &prices,
        r#"{"local": {"currency": "USD", "vcpu_hour": 0.01, "memory_gib_hour": 0.001,
            "disk_gib_hour": 0, "stopped_disk_gib_hour": 0, "as_of": "2027-01-01",
            "source": "our own machines", "note": "", "limits": {"max_cpus": 2},
            "default_disk_gib": 5}}"#,
    )
    .unwrap();
    let out = sbox(
        dir.path(),
        &[
            "shapes",
            "--provider",
            "local",
            "--prices",
            prices.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains("as of 2027-01-01, from our own machines"),
        "{text}"
    );
    assert!(
        text.contains("2x4                 5         $0.0240"),
        "{text}"
    );
    assert!(!text.contains("4x8"), "{text}");

    std::fs::write(&prices, r#"{"local": {"vcpu_hour": -1}}"#).unwrap();
    let out = sbox(
        dir.path(),
        &[
            "shapes",
            "--provider",
            "local",
            "--prices",
            prices.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("prices.json"), "{out:?}");
}

#[test]
fn reap_without_a_rule_destroys_nothing_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = sbox(dir.path(), &["reap", "--provider", "local", "--dry-run"]);
    assert!(out.status.success(), "{out:?}");
    assert!(stderr(&out).contains("no rule given"), "{out:?}");
    assert!(
        stdout(&out).ends_with("reap (dry run): 0 planned, 0 destroyed, 0 failed, 0 skipped\n"),
        "{out:?}"
    );
    let out = sbox(
        dir.path(),
        &["reap", "--provider", "local", "--max-age", "3 weeks"],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "clap refuses the duration: {out:?}"
    );
}

/// `sbox` with `stdin` on its standard input.
fn sbox_with_stdin(root: &Path, args: &[&str], stdin: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_sbox"))
        .args(args)
        .env("SBOX_LOCAL_ROOT", root.join("root"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A 1x1 PNG.
const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

#[test]
fn code_prints_output_and_the_result_and_fails_with_the_traceback() {
    let dir = tempfile::tempdir().unwrap();
    let id = create(dir.path());
    let out = sbox(
        dir.path(),
        &[
            "code",
            "-p",
            "local",
            &id,
            "-c",
            "import sys\nprint('out')\nprint('err', file=sys.stderr)\n6 * 7",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(stdout(&out), "out\n42\n");
    assert_eq!(stderr(&out), "err\n");

    let out = sbox(
        dir.path(),
        &["code", "-p", "local", &id, "-c", "print('before')\n1 / 0"],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(stdout(&out), "before\n");
    assert!(stderr(&out).contains("ZeroDivisionError"), "{out:?}");

    // From a file and from stdin.
    let file = dir.path().join("cell.py");
    std::fs::write(&file, "'from a file'").unwrap();
    let out = sbox(
        dir.path(),
        &["code", "-p", "local", &id, file.to_str().unwrap()],
    );
    assert_eq!(stdout(&out), "from a file\n", "{out:?}");
    let out = sbox_with_stdin(
        dir.path(),
        &["code", "-p", "local", &id, "-"],
        "print('from stdin')",
    );
    assert_eq!(stdout(&out), "from stdin\n", "{out:?}");

    // No code at all is a usage error.
    let out = sbox(dir.path(), &["code", "-p", "local", &id]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    // A timeout interrupts the cell and fails.
    let out = sbox(
        dir.path(),
        &[
            "code",
            "-p",
            "local",
            &id,
            "--timeout",
            "1s",
            "-c",
            "import time\ntime.sleep(30)",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("sbox: error: "), "{out:?}");
}

#[test]
fn code_saves_images_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let id = create(dir.path());
    let cell = format!(
        "import base64\nclass Dot:\n    def _repr_png_(self):\n        return base64.b64decode('{PNG_1X1}')\n    def __repr__(self):\n        return 'a dot'\ndisplay(Dot())\nDot()"
    );
    let out = sbox(dir.path(), &["code", "-p", "local", &id, "-c", &cell]);
    assert!(out.status.success(), "{out:?}");
    // The displayed figure prints nothing, the main result its text.
    assert_eq!(stdout(&out), "a dot\n");
    assert!(
        stderr(&out).contains("2 image(s) not saved (pass --save-images DIR"),
        "{out:?}"
    );

    let images = dir.path().join("images");
    let out = sbox(
        dir.path(),
        &[
            "code",
            "-p",
            "local",
            &id,
            "--save-images",
            images.to_str().unwrap(),
            "-c",
            &cell,
        ],
    );
    assert!(out.status.success(), "{out:?}");
    for n in [1, 2] {
        let path = images.join(format!("image-{n}.png"));
        assert!(
            stderr(&out).contains(&format!("saved image/png to {}", path.display())),
            "{out:?}"
        );
        assert!(
            std::fs::read(&path)
                .unwrap()
                .starts_with(b"\x89PNG\r\n\x1a\n")
        );
    }
}
