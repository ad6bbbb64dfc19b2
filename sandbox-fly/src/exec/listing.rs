//! The background processes of a machine, as the `PROCESSES` script lists them (running or
//! finished, until their files are cleaned up).

use super::process::{decode_b64, failure, run_script, validate_pid};
use super::scripts;
use crate::api::{AnswerSize, Api, ScriptCall};
use sandbox_sdk_core::{ProcessInfo, Result};

/// Lists the background processes started in the machine (running or finished, until their
/// files are cleaned up).
pub(crate) async fn processes(api: &Api, machine: &str) -> Result<Vec<ProcessInfo>> {
    let call = ScriptCall::new(scripts::PROCESSES, &[scripts::ROOT]).answer(AnswerSize::Listing);
    let resp = run_script(api, machine, call).await?;
    if resp.exit_code.unwrap_or(0) != 0 {
        return Err(failure(resp, "processes", machine, "listing processes"));
    }
    Ok(parse_processes(resp.stdout.as_deref().unwrap_or("")))
}

/// Parses `ID RUNNING BASE64(meta)` lines; unreadable lines are skipped.
pub(crate) fn parse_processes(text: &str) -> Vec<ProcessInfo> {
    #[derive(serde::Deserialize, Default)]
    struct Meta {
        #[serde(default)]
        argv: Vec<String>,
        #[serde(default)]
        tag: Option<String>,
        #[serde(default)]
        cwd: Option<String>,
    }
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let pid = parts.next()?.to_owned();
            // Only well-formed lines of ids the adapter could have made (the script lists no
            // others; this holds even if the machine's tools print something else).
            validate_pid(&pid).ok()?;
            let running = match parts.next()? {
                "1" => true,
                "0" => false,
                _ => return None,
            };
            let meta: Meta = parts
                .next()
                .and_then(decode_b64)
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
            if parts.next().is_some() {
                return None;
            }
            Some(ProcessInfo {
                pid,
                tag: meta.tag,
                argv: meta.argv,
                cwd: meta.cwd,
                running,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::process::b64;
    use base64::Engine;

    #[test]
    fn process_lines_parse() {
        let meta = b64().encode(r#"{"argv":["sleep","9"],"tag":"job","cwd":null}"#);
        let list = parse_processes(&format!("job 1 {meta}\npabc 0 \n\n"));
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].pid, "job");
        assert!(list[0].running);
        assert_eq!(list[0].argv, ["sleep", "9"]);
        assert_eq!(list[0].tag.as_deref(), Some("job"));
        assert!(!list[1].running);
    }
}
