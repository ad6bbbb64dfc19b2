//! Runs a few commands and file operations in a real E2B sandbox.
//!
//! ```sh
//! E2B_API_KEY=e2b_... cargo run -p sandbox-e2b --example e2b
//! ```
//!
//! Without `E2B_API_KEY` it prints how to run it and exits successfully, so CI can build and run
//! it without an account.

use bytes::Bytes;
use futures::StreamExt;
use sandbox_e2b::E2bBuilder;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, CreateSpec, ProcessEvent};
use std::time::Duration;

#[tokio::main]
async fn main() -> sandbox_sdk_core::Result<()> {
    if std::env::var_os("E2B_API_KEY").is_none_or(|v| v.is_empty()) {
        println!(
            "skipped: set E2B_API_KEY (an `e2b_...` key from https://e2b.dev/dashboard) to run this example"
        );
        return Ok(());
    }
    let provider = E2bBuilder::from_env().build()?;
    let sandbox = provider
        .create(
            &CreateSpec::new()
                .metadata("example", "sandbox-e2b")
                .timeout(Duration::from_secs(300)),
        )
        .await?;
    println!("created sandbox {}", sandbox.id());

    // Run to completion: stdout and stderr apart, the real exit code.
    let out = sandbox
        .run(&Command::shell("echo hello; echo oops >&2; exit 3"))
        .await;
    match out {
        Ok(out) => println!(
            "stdout={:?} stderr={:?} {}",
            out.stdout_lossy(),
            out.stderr_lossy(),
            out.status
        ),
        Err(e) => eprintln!("run failed: {e}"),
    }

    // Stream output as it is produced; the process may live 30 s at most.
    let mut process = sandbox
        .exec(
            &Command::shell("for i in 1 2 3; do echo tick $i; sleep 1; done")
                .timeout(Duration::from_secs(30)),
        )
        .await?;
    while let Some(event) = process.next().await {
        match event? {
            ProcessEvent::Stdout(b) => print!("{}", String::from_utf8_lossy(&b)),
            ProcessEvent::Stderr(b) => eprint!("{}", String::from_utf8_lossy(&b)),
            ProcessEvent::Exit(status) => println!("exited: {status}"),
        }
    }

    // Files.
    sandbox
        .write_file("example/hello.txt", Bytes::from_static(b"hi from Rust\n"))
        .await?;
    let text = sandbox.read_to_string("example/hello.txt").await?;
    println!("read back: {text:?}");

    let link = sandbox.preview_link(8080).await?;
    println!("port 8080 would be served at {}", link.url);

    sandbox.destroy().await?;
    println!("destroyed");
    Ok(())
}
