//! Creates a Fly Machine, runs commands with live output, moves a file in and out, and destroys
//! it. Needs `FLY_API_TOKEN` and `FLY_APP_NAME` (an existing app); exits with a message when the
//! token is unset.
//!
//! ```text
//! FLY_API_TOKEN=$(fly tokens create deploy -a my-app) FLY_APP_NAME=my-app cargo run -p sandbox-fly --example fly
//! ```

use futures::StreamExt;
use sandbox_fly::FlyBuilder;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, CreateSpec, ProcessEvent};
use std::time::Duration;

#[tokio::main]
async fn main() -> sandbox_sdk_core::Result<()> {
    if std::env::var_os("FLY_API_TOKEN").is_none() {
        println!("FLY_API_TOKEN is not set; skipping the Fly example (see the file's docs).");
        return Ok(());
    }
    let fly = FlyBuilder::from_env().build()?;
    println!("app {}: creating a machine…", fly.app());
    let sandbox = fly
        .create_machine(
            &CreateSpec::new()
                .metadata("example", "sandbox-fly")
                .timeout(Duration::from_secs(600)),
        )
        .await?;
    println!("machine {} is {:?}", sandbox.id(), sandbox.machine().state);

    let result = demo(&sandbox).await;
    sandbox.destroy().await?;
    println!("destroyed {}", sandbox.id());
    result
}

async fn demo(sandbox: &sandbox_fly::FlySandbox) -> sandbox_sdk_core::Result<()> {
    // Buffered: one /exec call.
    let out = sandbox
        .run(&Command::shell("uname -a; echo oops >&2; exit 3").timeout(Duration::from_secs(10)))
        .await?;
    println!(
        "stdout: {}stderr: {}{}",
        out.stdout_lossy(),
        out.stderr_lossy(),
        out.status
    );

    // Emulated streaming: polled from files in the machine.
    let mut process = sandbox
        .exec(&Command::shell(
            "for i in 1 2 3; do echo tick $i; sleep 1; done",
        ))
        .await?;
    while let Some(event) = process.next().await {
        match event? {
            ProcessEvent::Stdout(b) => print!("live: {}", String::from_utf8_lossy(&b)),
            ProcessEvent::Stderr(b) => eprint!("live err: {}", String::from_utf8_lossy(&b)),
            ProcessEvent::Exit(status) => println!("exited: {status}"),
        }
    }

    sandbox
        .write_file("/tmp/example/hello.txt", "hello from sandbox-fly\n".into())
        .await?;
    println!(
        "read back: {}",
        sandbox.read_to_string("/tmp/example/hello.txt").await?
    );
    Ok(())
}
