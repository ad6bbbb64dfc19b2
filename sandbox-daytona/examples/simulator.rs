//! Test agent code offline: start the Daytona simulator (`sandbox_sim::daytona`,
//! feature `sim`), point the adapter at it, and use it as you would use Daytona: its sandboxes
//! pass through their states in time and its commands are real local processes.
//!
//! ```sh
//! cargo run -p sandbox-daytona --example simulator
//! ```

use sandbox_daytona::DaytonaProvider;
use sandbox_sdk_core::{CreateSpec, Provider, SandboxExt};
use sandbox_sim::daytona::DaytonaSim;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sim = DaytonaSim::start().await?;
    let provider = DaytonaProvider::builder()
        .api_url(sim.api_url())
        .api_key(sim.api_key())
        .build()?;
    let sandbox = provider
        .create(&CreateSpec::new().metadata("agent", "offline"))
        .await?;
    let out = sandbox.run_shell("echo hi; echo oops >&2; exit 3").await?;
    assert_eq!(
        (out.stdout_lossy(), out.stderr_lossy(), out.status.code),
        ("hi\n".to_owned(), "oops\n".to_owned(), Some(3))
    );
    sandbox.write_file("notes.txt", "offline".into()).await?;
    println!("{}", sandbox.read_to_string("notes.txt").await?);
    sandbox.destroy().await?;
    Ok(())
}
