//! An anchor on this machine, and commands run in it with std's `Command`.
#![cfg(target_os = "linux")]

use sandbox_confine::{Anchor, Limits, ViewSpec};
use std::process::{Command, Output};
use std::sync::Arc;

struct Box_ {
    _dir: tempfile::TempDir,
    spec: ViewSpec,
    anchor: Arc<Anchor>,
}

fn start(network_off: bool) -> Box_ {
    let dir = tempfile::tempdir().unwrap();
    let spec = ViewSpec {
        work: dir.path().join("work"),
        tmp: dir.path().join("tmp"),
        home: "/home/user".into(),
        network_off,
        tethered: true,
    };
    let limits = Limits {
        processes: 64,
        file_size: 1 << 20,
        open_files: 256,
    };
    let anchor = Arc::new(Anchor::start(&spec, limits).expect("an anchor on this machine"));
    Box_ {
        _dir: dir,
        spec,
        anchor,
    }
}

fn sh(b: &Box_, script: &str) -> Output {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(script)
        .env_clear()
        .env("PATH", sandbox_confine::PATH);
    b.anchor.confine(&mut cmd, "/home/user").unwrap();
    cmd.output().unwrap()
}

#[test]
fn a_command_sees_its_view_and_nothing_of_the_host() {
    let b = start(true);
    assert!(b.anchor.layers().namespaces, "{}", b.anchor.layers());
    let out = sh(
        &b,
        "id -u; pwd; echo hi > /home/user/a; echo t > /tmp/b; echo $$",
    );
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(&lines[..2], ["0", "/home/user"]);
    assert_eq!(
        std::fs::read_to_string(b.spec.work.join("a")).unwrap(),
        "hi\n"
    );
    assert_eq!(
        std::fs::read_to_string(b.spec.tmp.join("b")).unwrap(),
        "t\n"
    );
    for attempt in [
        "ls /root",
        "cat /proc/1/environ",
        "touch /usr/x",
        "touch /x",
        "test -s /etc/shadow",
        "mount -t tmpfs none /tmp",
        "kill -0 1 && kill -9 1",
        &format!("test -e {}", b.spec.work.display()),
    ] {
        let out = sh(&b, attempt);
        assert!(!out.status.success(), "{attempt} worked: {out:?}");
    }
}

#[test]
fn exit_codes_and_signals_read_as_without_confinement() {
    let b = start(true);
    assert_eq!(sh(&b, "exit 7").status.code(), Some(7));
    let killed = sh(&b, "kill -9 $$");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(killed.status.signal(), Some(9), "{killed:?}");
}

#[test]
fn destroying_the_anchor_ends_every_process() {
    let b = start(true);
    let mut child = spawn(&b, "setsid sleep 1000 & sleep 1000");
    assert!(
        eventually(|| b.anchor.members().len() >= 2),
        "{:?}",
        b.anchor.members()
    );
    b.anchor.kill();
    assert!(!child.wait().unwrap().success());
    assert!(
        eventually(|| b.anchor.members().is_empty()),
        "processes outlived the anchor: {:?}",
        b.anchor.members()
    );
}

/// `script` started in the sandbox, in its home.
fn spawn(b: &Box_, script: &str) -> std::process::Child {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(script);
    b.anchor.confine(&mut cmd, "/home/user").unwrap();
    cmd.spawn().unwrap()
}

#[test]
fn network_off_reaches_no_host_service_and_on_does() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // bash's /dev/tcp where there is bash, python otherwise: both connect and exit 0 on success.
    let probe =
        format!("python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)'");
    let off = start(true);
    assert!(
        !sh(&off, &probe).status.success(),
        "a host service was reached"
    );
    assert!(
        sh(
            &off,
            "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen()'"
        )
        .status
        .success(),
        "loopback is up inside"
    );
    let on = start(false);
    let out = sh(&on, &probe);
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn a_fork_bomb_and_a_file_size_bomb_end_bounded() {
    let b = start(true);
    // 64 processes at most: the bomb's forks fail and the command ends.
    sh(
        &b,
        "i=0; while [ $i -lt 200 ]; do sleep 5 >/dev/null 2>&1 & i=$((i+1)); done 2>/dev/null",
    );
    assert!(
        b.anchor.members().len() <= 64,
        "{} processes",
        b.anchor.members().len()
    );
    let out = sh(&b, "head -c 4194304 /dev/zero > /home/user/big");
    assert!(!out.status.success());
    assert!(std::fs::metadata(b.spec.work.join("big")).unwrap().len() <= 1 << 20);
}

/// Waits (polling, at most 10 s) for `done`.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..1000 {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

#[test]
fn an_anchor_holds_none_of_its_makers_descriptors() {
    use std::io::Read;
    let (mut read, write) = std::io::pipe().unwrap();
    let b = start(true);
    drop(write);
    // Were the anchor holding a copy of the write end, this read would wait for ever.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        tx.send(read.read_to_end(&mut buf).map(|_| buf.len()).ok())
    });
    let got = rx.recv_timeout(std::time::Duration::from_secs(10));
    assert_eq!(got, Ok(Some(0)), "the anchor kept its maker's pipe open");
    drop(b);
}

#[test]
fn removing_the_work_directory_ends_the_sandbox() {
    let b = start(true);
    let mut child = spawn(&b, "sleep 1000");
    assert!(eventually(|| !b.anchor.members().is_empty()));
    let pid = b.anchor.pid();
    std::fs::remove_dir_all(&b.spec.work).unwrap();
    assert!(!child.wait().unwrap().success());
    let gone = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |stat| stat.contains(") Z "))
    };
    assert!(eventually(gone), "the anchor outlived its directory");
}
