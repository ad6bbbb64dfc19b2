//! A tour of the SDK on the embedded `local` provider: no account, no network.
//!
//! ```sh
//! cargo run --example quickstart
//! ```
//!
//! It creates a sandbox, streams a command's output as it is written, shows a failing command's
//! exit code, writes and reads a file, prints the provider's capability table, and destroys the
//! sandbox. Swap `LocalProvider` for an adapter from `sandbox-e2b`, `sandbox-daytona` or
//! `sandbox-fly` and the rest of the code stays the same.

use sandbox_sdk_core::local::LocalProvider;
use sandbox_sdk_core::prelude::*;
use sandbox_sdk_core::{Command, CreateSpec, ProcessEvent, Result, matrix_markdown};
use std::time::Instant;

#[tokio::main]
async fn main() -> Result<()> {
    let provider = LocalProvider::new();

    // 1. Create a sandbox. On `local` it is a private temporary directory on this machine.
    let sandbox = provider.create(&CreateSpec::new()).await?;
    println!(
        "created sandbox {} on `{}`\n",
        sandbox.id(),
        sandbox.provider()
    );

    // Steps 2 to 5, then destroy the sandbox whatever happened in them.
    let tour = tour(sandbox.as_ref()).await;

    // 6. Destroy it: every process in it is killed and its directory removed.
    sandbox.destroy().await?;
    println!("destroyed sandbox {}", sandbox.id());
    tour
}

async fn tour(sandbox: &dyn Sandbox) -> Result<()> {
    // 2. Stream a command's output live: stdout and stderr arrive as separate, tagged events
    //    while the command runs, not all at once when it ends.
    let script = "for i in 1 2 3; do echo \"step $i\"; sleep 0.3; done; \
                  echo 'a warning' >&2; echo done";
    println!("$ {script}");
    let started = Instant::now();
    let mut process = sandbox.exec(&Command::shell(script)).await?;
    while let Some(event) = process.next_event().await {
        let at = started.elapsed().as_secs_f32();
        match event? {
            ProcessEvent::Stdout(chunk) => print_lines(at, "stdout", &chunk),
            ProcessEvent::Stderr(chunk) => print_lines(at, "stderr", &chunk),
            ProcessEvent::Exit(status) => println!("  [{at:4.1}s] {status}"),
        }
    }

    // 3. A failing command is not an error: its exit code comes back with its output.
    let line = "echo 'no such thing' >&2; exit 3";
    println!("\n$ {line}");
    let output = sandbox.run_shell(line).await?;
    println!(
        "  {} (success: {}), stderr: {:?}",
        output.status,
        output.status.success(),
        output.stderr_lossy().trim_end()
    );

    // 4. Files: write bytes, read them back. Relative paths live in the sandbox's directory.
    let path = "notes/hello.txt";
    let written = sandbox
        .write_file(path, Bytes::from_static(b"hello from the sandbox\n"))
        .await?;
    let text = sandbox.read_to_string(path).await?;
    println!(
        "\nwrote {} bytes to {path}, read back {text:?}",
        written.bytes
    );

    // 5. What this provider can do: the same table the README shows for every provider.
    //    An `unsupported` operation fails with `NotSupported` before anything is sent.
    println!("\ncapabilities of `{}`:\n", sandbox.provider());
    println!(
        "{}",
        matrix_markdown(&[(sandbox.provider(), sandbox.capabilities())])
    );
    Ok(())
}

/// Prints each line of a chunk with when it arrived and which stream it came from.
fn print_lines(at: f32, stream: &str, chunk: &[u8]) {
    for line in String::from_utf8_lossy(chunk).lines() {
        println!("  [{at:4.1}s] {stream} | {line}");
    }
}
