//! Stateful code on the embedded `local` provider (core's emulated kernel) against a raw
//! Python REPL over pipes doing the same work: a warm kernel's per-cell overhead.

use crate::harness::{Config, Result, interleaved, latency_record};
use sandbox_sdk_core::code::RunCode;
use sandbox_sdk_core::local::LocalProvider;
use sandbox_sdk_core::{CreateSpec, Provider};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const GROUP: &str = "code";

/// The baseline: one `python3` reading a line of code, `exec`ing it in kept globals, and
/// answering one line, over plain pipes (no keys, no framing, no rich results).
const RAW_REPL: &str = "import sys, json\ng = {}\nfor line in sys.stdin:\n    code = json.loads(line)\n    *body, last = code.split('\\n')\n    exec('\\n'.join(body), g)\n    sys.stdout.write(repr(eval(last, g)) + '\\n')\n    sys.stdout.flush()\n";

/// Runs the group.
pub async fn run(config: &Config) -> Result {
    let provider = LocalProvider::new();
    let sandbox = provider.create(&CreateSpec::new()).await?;
    // Warm the kernel, as a session does after its first cell.
    sandbox
        .run_code(&RunCode::python("x = 20"))
        .await?
        .execution()
        .await?;
    let mut raw = tokio::process::Command::new("python3")
        .args(["-u", "-c", RAW_REPL])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut raw_in = raw.stdin.take().ok_or("no stdin pipe")?;
    let mut raw_out = BufReader::new(raw.stdout.take().ok_or("no stdout pipe")?).lines();
    raw_in.write_all(b"\"x = 20\\n0\"\n").await?;
    raw_out.next_line().await?;

    let cells = config.spawns;
    let cell = "y = x * 2\ny + 2";
    let timings = interleaved(
        config,
        async || {
            for _ in 0..cells {
                let done = sandbox
                    .run_code(&RunCode::python(cell))
                    .await?
                    .execution()
                    .await?;
                if done.text() != Some("42") {
                    return Err(format!("the cell gave {done:?}").into());
                }
            }
            Ok(())
        },
        async || {
            for _ in 0..cells {
                let line = serde_json::to_string(cell)? + "\n";
                raw_in.write_all(line.as_bytes()).await?;
                if raw_out.next_line().await?.as_deref() != Some("42") {
                    return Err("the raw REPL did not answer 42".into());
                }
            }
            Ok(())
        },
    )
    .await?;
    latency_record(
        GROUP,
        format!("`run_code` on a warm emulated kernel, x{cells}"),
        "raw python3 REPL over pipes (exec + eval, one line back)",
        cells,
        &timings,
        "the SDK also keys every frame, drains fd 1 and 2 through pipes, formats a MIME bundle \
         and an execution count, and runs each cell under a timeout"
            .to_owned(),
    )
    .emit();
    sandbox.destroy().await?;
    Ok(())
}
