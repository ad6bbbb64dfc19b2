//! A provider simulator (`sandbox_sim`) served from a child process of this bench
//! binary (`--serve-sim PROVIDER LIMITS FAULTS`), so a measured client's memory is its own and
//! the simulator's work does not run on the client's runtime.
//!
//! The child prints the variables that point a client at it (the provider's usual environment
//! variables) as one JSON line, then serves until its stdin closes. Each line `requests` written
//! to its stdin is answered with the number of requests it served since the last such line.

use crate::harness::Result;
use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

/// Serves one provider simulator until stdin closes.
pub const SERVE_FLAG: &str = "--serve-sim";

/// A simulator running in a child process; dropping it stops the child.
pub struct SimChild {
    child: Child,
    /// The child's stdin and stdout; `None` once closed.
    io: Mutex<Option<(ChildStdin, BufReader<ChildStdout>)>>,
    vars: Vec<(String, String)>,
}

impl SimChild {
    /// Starts the simulator of `provider`, with its documented rate limits on or off and the
    /// fault plan `faults` (`sandbox_sim::faults` syntax; empty for none).
    pub fn start(provider: &str, limits: bool, faults: &str) -> Result<SimChild> {
        let limits = if limits { "on" } else { "off" };
        let mut child = Command::new(std::env::current_exe()?)
            .args([SERVE_FLAG, provider, limits, faults])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no simulator stdin")?;
        let mut stdout = BufReader::new(child.stdout.take().ok_or("no simulator stdout")?);
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let vars: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&line)
            .map_err(|e| format!("the {provider} simulator printed {line:?}: {e}"))?;
        let vars = vars
            .into_iter()
            .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_owned()))
            .collect();
        Ok(SimChild {
            child,
            io: Mutex::new(Some((stdin, stdout))),
            vars,
        })
    }

    /// The variables that point a client at the simulator (`E2B_API_URL`, …).
    pub fn vars(&self) -> &[(String, String)] {
        &self.vars
    }

    /// One of [`SimChild::vars`], for an adapter's `from_lookup`.
    pub fn var(&self, name: &str) -> Option<String> {
        self.vars
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    /// Requests the simulator served since the last call (or since it started).
    pub fn requests(&self) -> Result<u64> {
        let mut io = self.io.lock().map_err(|_| "simulator pipe poisoned")?;
        let (stdin, stdout) = io.as_mut().ok_or("the simulator is stopped")?;
        writeln!(stdin, "requests")?;
        stdin.flush()?;
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        Ok(line.trim().parse()?)
    }
}

impl Drop for SimChild {
    fn drop(&mut self) {
        // Closing its stdin stops the simulator.
        if let Ok(io) = self.io.get_mut() {
            io.take();
        }
        let _ = self.child.wait();
    }
}

/// `--serve-sim PROVIDER LIMITS FAULTS`: serves the simulator until stdin closes.
pub async fn serve(provider: &str, limits: &str, faults: &str) -> Result {
    let faults = sandbox_sim::FaultPlan::parse(faults)?;
    let sim = sandbox_sim::start(provider, 0, faults).await?;
    sim.set_rate_limits(limits == "on");
    let vars: serde_json::Map<String, serde_json::Value> = sim
        .env()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.into()))
        .collect();
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{}", serde_json::Value::Object(vars))?;
    stdout.flush()?;
    let (asked, mut questions) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            if line.is_err() || asked.send(()).is_err() {
                break;
            }
        }
    });
    while questions.recv().await.is_some() {
        let log = sim.server().log();
        let served = log.entries().len();
        log.clear();
        writeln!(stdout, "{served}")?;
        stdout.flush()?;
    }
    // Dropping the simulator removes its sandboxes' directories; exiting at once then spares
    // its machines' pending steps a runtime shutdown they would panic in (a timer on a runtime
    // going away).
    drop(sim);
    std::process::exit(0)
}
