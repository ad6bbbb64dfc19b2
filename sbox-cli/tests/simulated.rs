//! `sbox exec` and `sbox cp` against the provider simulators (`sandbox_sim`): a
//! Daytona, Fly and E2B server on loopback with real processes behind it, and sbox configured
//! only through each provider's usual environment variables (`Simulator::env`), as a user
//! would configure it for the real service.
//!
//! Per provider: exec's output arrives while the command still runs, stdout and stderr stay
//! apart, the exit code (or 128 + a signal) becomes sbox's status; cp moves a file up and back
//! byte for byte, a large binary one too, and a missing file fails without leaving a partial
//! download.

use sandbox_sim::{FaultPlan, Simulator};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The most any one step may take before the test fails instead of hanging.
const BOUND: Duration = Duration::from_secs(120);

/// A simulator and the sandbox sbox created in it.
struct Sim {
    sim: Box<dyn Simulator>,
    provider: &'static str,
    id: String,
}

impl Sim {
    async fn start(provider: &'static str) -> Sim {
        let sim = sandbox_sim::start(provider, 0, FaultPlan::new())
            .await
            .unwrap();
        // The documented rate limits (Fly's one exec per second after a burst) are the
        // adapters' simulator tests' subject; here they would only make the test slow.
        sim.set_rate_limits(false);
        let mut this = Sim {
            sim,
            provider,
            id: String::new(),
        };
        let out = this.sbox(&["create"]).await;
        assert!(out.status.success(), "{provider} create: {out:?}");
        this.id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        assert!(!this.id.is_empty(), "{provider}: no id printed");
        this
    }

    /// `sbox SUBCOMMAND --provider P ARGS...` with the simulator's variables and no others of
    /// any provider.
    fn command(&self, subcommand: &str, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbox"));
        command
            .arg(subcommand)
            .args(["--provider", self.provider])
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        for (name, _) in std::env::vars() {
            if ["E2B_", "DAYTONA_", "FLY_"]
                .iter()
                .any(|p| name.starts_with(p))
            {
                command.env_remove(name);
            }
        }
        for (name, value) in self.sim.env() {
            command.env(name, value);
        }
        command
    }

    async fn sbox(&self, args: &[&str]) -> Output {
        let (subcommand, rest) = args.split_first().unwrap();
        let output = self.command(subcommand, rest).output();
        tokio::time::timeout(BOUND, output)
            .await
            .unwrap_or_else(|_| panic!("{}: sbox {args:?} did not finish", self.provider))
            .unwrap()
    }

    async fn exec(&self, argv: &[&str]) -> Output {
        let mut args = vec!["exec", self.id.as_str(), "--"];
        args.extend(argv);
        self.sbox(&args).await
    }

    fn remote(&self, path: &str) -> String {
        format!("{}:{path}", self.id)
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// exec: output and exit codes, stdout and stderr apart.
async fn exec_passes_output_and_status_through(sim: &Sim) {
    let p = sim.provider;
    let out = sim
        .exec(&["sh", "-c", "echo out; echo err >&2; exit 7"])
        .await;
    assert_eq!(out.status.code(), Some(7), "{p}: {out:?}");
    assert_eq!(out.stdout, b"out\n", "{p}: {out:?}");
    assert_eq!(out.stderr, b"err\n", "{p}: {out:?}");

    let out = sim.exec(&["true"]).await;
    assert_eq!(out.status.code(), Some(0), "{p}: {out:?}");

    // Daytona's simulator runs a command in a session shell that a command killing its own
    // shell process with SIGKILL takes down with it: the exec answers 410 SESSION_ENDED (the
    // adapter's `Conflict`) rather than an exit by signal, so the signal case is checked on
    // the other providers only.
    if p != "daytona" {
        let out = sim.exec(&["sh", "-c", "kill -9 $$"]).await;
        assert_eq!(out.status.code(), Some(128 + 9), "{p}: {out:?}");
    }
}

/// exec: the first line reaches sbox's stdout while the command is still running. The command
/// cannot end before the test has read that line and then created the file it waits for.
async fn exec_output_is_live(sim: &Sim) {
    let p = sim.provider;
    let script = "echo ready; while [ ! -e sbox-go ]; do sleep 0.05; done; echo done; exit 4";
    let mut child = sim
        .command("exec", &[sim.id.as_str(), "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(BOUND, lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("{p}: no live output while the command runs"))
        .unwrap();
    assert_eq!(first.as_deref(), Some("ready"), "{p}");
    let touched = sim.exec(&["touch", "sbox-go"]).await;
    assert!(touched.status.success(), "{p}: {touched:?}");
    let second = tokio::time::timeout(BOUND, lines.next_line())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.as_deref(), Some("done"), "{p}");
    let status = tokio::time::timeout(BOUND, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(4), "{p}");
}

/// cp: up and back byte for byte, the sandbox sees the same bytes, and a missing file is an
/// error that leaves nothing behind.
async fn cp_round_trips_bytes(sim: &Sim, dir: &Path, name: &str, data: &[u8]) {
    let p = sim.provider;
    let src = dir.join(name);
    std::fs::write(&src, data).unwrap();
    let remote = sim.remote(name);
    let out = sim.sbox(&["cp", src.to_str().unwrap(), &remote]).await;
    assert!(out.status.success(), "{p} upload: {out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(&format!("copied {} bytes to {remote}", data.len())),
        "{p}: {said}"
    );

    let counted = sim.exec(&["sh", "-c", &format!("wc -c < {name}")]).await;
    assert_eq!(
        stdout(&counted).trim(),
        data.len().to_string(),
        "{p}: {counted:?}"
    );

    let back = dir.join(format!("{name}.back"));
    let out = sim.sbox(&["cp", &remote, back.to_str().unwrap()]).await;
    assert!(out.status.success(), "{p} download: {out:?}");
    let got = std::fs::read(&back).unwrap();
    assert_eq!(got.len(), data.len(), "{p}: size after the round trip");
    assert!(got == data, "{p}: bytes changed on the round trip");
}

async fn cp_of_a_missing_file_fails_cleanly(sim: &Sim, dir: &Path) {
    let p = sim.provider;
    let to = dir.join("missing.out");
    let out = sim
        .sbox(&["cp", &sim.remote("no/such/file"), to.to_str().unwrap()])
        .await;
    assert_eq!(out.status.code(), Some(1), "{p}: {out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("sbox: error: "),
        "{p}: {out:?}"
    );
    assert!(!to.exists(), "{p}: a failed copy left {}", to.display());
    assert!(
        !dir.join("missing.out.sbox-partial").exists(),
        "{p}: a failed copy left its partial file"
    );
}

/// Every byte value, in an order that repeats only every 251 bytes.
fn binary(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

async fn exec_and_cp_work_against(provider: &'static str) {
    let sim = Sim::start(provider).await;
    let dir = tempfile::tempdir().unwrap();
    exec_passes_output_and_status_through(&sim).await;
    exec_output_is_live(&sim).await;
    cp_round_trips_bytes(
        &sim,
        dir.path(),
        "small.txt",
        b"one line\nand no newline at the end",
    )
    .await;
    // Larger than every chunk and buffer along the way, with every byte value, NUL and CR
    // included: 5 MiB through E2B's and Daytona's file endpoints; 1 MiB on Fly, whose files
    // move over exec 48 KiB at a time (22 execs each way), to keep the test quick.
    let large = match provider {
        "fly" => 1024 * 1024 + 17,
        _ => 5 * 1024 * 1024 + 17,
    };
    cp_round_trips_bytes(&sim, dir.path(), "large.bin", &binary(large)).await;
    cp_of_a_missing_file_fails_cleanly(&sim, dir.path()).await;
    let out = sim.sbox(&["rm", &sim.id]).await;
    assert!(out.status.success(), "{provider} rm: {out:?}");
    assert_eq!(sim.sim.sandboxes(), 0, "{provider}: the sandbox is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_and_cp_against_the_daytona_simulator() {
    exec_and_cp_work_against("daytona").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_and_cp_against_the_fly_simulator() {
    exec_and_cp_work_against("fly").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_and_cp_against_the_e2b_simulator() {
    exec_and_cp_work_against("e2b").await;
}
