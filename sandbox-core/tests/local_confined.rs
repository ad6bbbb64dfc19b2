//! The local provider with confinement on: commands and the file primitives share one view,
//! and what a command tries outside it fails (`escapes: N tried, 0 worked`).
#![cfg(all(feature = "local", target_os = "linux"))]

use bytes::Bytes;
use sandbox_sdk_core::local::LocalProvider;
use sandbox_sdk_core::local::confine::Confine;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, CreateSpec, ErrorKind, Provider};

#[tokio::test]
async fn a_confined_sandbox_shares_its_view_with_the_file_api_and_nothing_else() {
    let root = tempfile::tempdir().unwrap();
    let provider = LocalProvider::with_root(root.path().join("r")).confine(Confine::Required);
    let layers = provider.confinement().await.unwrap();
    assert!(layers.namespaces && layers.seccomp, "{layers}");
    let sandbox = provider.create(&CreateSpec::new()).await.unwrap();
    sandbox
        .write_file("/home/user/a.txt", Bytes::from_static(b"api"))
        .await
        .unwrap();
    sandbox
        .write_file("/tmp/b.txt", Bytes::from_static(b"tmp"))
        .await
        .unwrap();
    let out = sandbox
        .run(&Command::shell(
            "cat a.txt /tmp/b.txt; pwd; echo cmd > /home/user/c.txt",
        ))
        .await
        .unwrap();
    assert_eq!(out.stdout_lossy(), "apitmp/home/user\n");
    assert_eq!(&sandbox.read_file("c.txt").await.unwrap()[..], b"cmd\n");
    let outside = sandbox.read_file("/etc/hostname").await.unwrap_err();
    assert_eq!(outside.kind(), ErrorKind::Validation);

    let attempts = [
        "ls /root",
        "cat /proc/1/environ",
        "cat /proc/$PPID/environ",
        "touch /usr/x",
        "test -s /etc/shadow",
        "mount -t tmpfs none /mnt",
        &format!("ls {}", root.path().display()),
        "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), 1)'",
    ];
    let mut worked = 0;
    for attempt in attempts {
        let out = sandbox.run(&Command::shell(attempt)).await.unwrap();
        if out.status.code == Some(0) {
            eprintln!("escape worked: {attempt}: {}", out.stdout_lossy());
            worked += 1;
        }
    }
    println!("escapes: {} tried, {worked} worked", attempts.len());
    assert_eq!(worked, 0);
    let preview = sandbox.preview_link(8080).await.unwrap_err();
    assert_eq!(preview.kind(), ErrorKind::NotSupported);
    sandbox.destroy().await.unwrap();
}
