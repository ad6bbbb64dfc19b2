//! Prints what every provider compiled into this build can do, side by side: a Markdown table,
//! or with `--json` an object `{"provider": {"capability": "level", ..., "flags": {...}}}`.
//! `cargo xtask capabilities` and the README's table run it with every provider:
//!
//! ```text
//! cargo run -p sandbox-sdk --features full --example capabilities -- [--json]
//! ```

use sandbox_sdk::{Capabilities, capabilities_of, matrix_json, matrix_markdown, providers};

fn main() -> sandbox_sdk::Result<()> {
    let json = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--json") => true,
        Some(other) => {
            eprintln!("unknown argument {other:?}; usage: capabilities [--json]");
            std::process::exit(2);
        }
    };
    let matrix = providers()
        .into_iter()
        .map(|name| Ok((name, capabilities_of(name)?)))
        .collect::<sandbox_sdk::Result<Vec<(&str, Capabilities)>>>()?;
    if json {
        let value = matrix_json(&matrix);
        println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string())
        );
    } else {
        print!("{}", matrix_markdown(&matrix));
    }
    Ok(())
}
