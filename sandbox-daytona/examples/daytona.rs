//! Create a Daytona sandbox, run a command with stdout and stderr apart, move a file in and
//! out, get a preview link, and destroy the sandbox.
//!
//! ```sh
//! DAYTONA_API_KEY=dtn_... cargo run -p sandbox-daytona --example daytona
//! ```
//!
//! Without `DAYTONA_API_KEY` it prints how to run it and exits successfully.

use sandbox_daytona::DaytonaBuilder;
use sandbox_sdk_core::{Command, CreateSpec, Provider, SandboxExt};
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var("DAYTONA_API_KEY").map_or(true, |k| k.trim().is_empty()) {
        println!(
            "skipped: set DAYTONA_API_KEY (and optionally DAYTONA_API_URL, DAYTONA_TARGET) to run this example against Daytona"
        );
        return Ok(());
    }
    let provider = DaytonaBuilder::from_env().build()?;
    let sandbox = provider
        .create(
            &CreateSpec::new()
                .metadata("example", "sandbox-daytona")
                .timeout(Duration::from_secs(15 * 60)),
        )
        .await?;
    println!("created {}", sandbox.id());

    let result = async {
        let output = sandbox
            .run(&Command::shell(
                "echo hello from $(hostname); echo oops >&2; exit 3",
            ))
            .await?;
        println!(
            "exit {:?}\nstdout: {}stderr: {}",
            output.status.code,
            output.stdout_lossy(),
            output.stderr_lossy()
        );

        sandbox
            .write_file("example/hello.txt", "hi there\n".into())
            .await?;
        let back = sandbox.read_to_string("example/hello.txt").await?;
        println!("file round trip: {back:?}");

        let link = sandbox.preview_link(8080).await?;
        println!("port 8080 is at {} (send the headers it lists)", link.url);
        Ok::<_, sandbox_sdk_core::Error>(())
    }
    .await;

    sandbox.destroy().await?;
    println!("destroyed {}", sandbox.id());
    result?;
    Ok(())
}
