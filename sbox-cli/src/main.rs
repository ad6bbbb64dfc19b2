//! `sbox`: drive sandboxes of any provider of `sandbox-sdk-core` from the shell, and serve the
//! capability-gated agent tools of `sandbox-tools` over MCP.

mod code;
mod fleet;
mod mcp;
mod out;
mod progress;
mod registry;

use clap::{Parser, Subcommand};
use futures::StreamExt;
use registry::Registered;
use sandbox_sdk_core::fleet::{Owner, ReapPolicy};
use sandbox_sdk_core::text::{escape_controls, escape_controls_in_lines};
use sandbox_sdk_core::{Command, CreateSpec, ListFilter, ProcessEvent, ProviderExt, Sandbox};
use sandbox_tools::{ToolConfig, ToolSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

// The help names the providers from the registry (`registry::names`), never by hand.
#[derive(Debug, Parser)]
#[command(name = "sbox", version, about = about())]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

/// Whose sandboxes: the owner label `{prefix}_owner = {owner}` (by default
/// `sandbox_tools_owner = u{uid}.{host}`, the user running sbox: the label `sbox create` and
/// `sbox mcp` put on theirs).
#[derive(Debug, clap::Args)]
struct OwnerArg {
    /// The owner id.
    #[arg(long)]
    owner: Option<String>,
    /// The owner label's prefix (the label key is PREFIX_owner).
    #[arg(long)]
    prefix: Option<String>,
}

impl OwnerArg {
    fn owner(&self) -> Result<Owner, Fail> {
        fleet::owner(self.prefix.as_deref(), self.owner.as_deref())
    }
}

/// Which provider, by its name in the registry (credentials from the provider's usual
/// environment variables).
#[derive(Debug, clap::Args)]
struct ProviderArg {
    #[arg(long, short = 'p', help = provider_help())]
    provider: String,
}

/// `sbox --help`'s first line.
fn about() -> String {
    format!(
        "Drive sandboxes ({}) from the shell, or serve agent tools over MCP",
        registry::names()
    )
}

/// The help of `--provider`.
fn provider_help() -> String {
    format!(
        "The provider: {} (credentials from its usual environment variables)",
        registry::names()
    )
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Print the provider's capability map as JSON (needs no credentials).
    Caps(ProviderArg),
    /// Create a sandbox (labelled as ours) and print its id.
    Create {
        #[command(flatten)]
        provider: ProviderArg,
        /// The template or image to start from.
        #[arg(long)]
        template: Option<String>,
    },
    /// List sandboxes: id, state, template.
    Ls {
        #[command(flatten)]
        provider: ProviderArg,
        /// Only the sandboxes sbox and its tools created.
        #[arg(long)]
        ours: bool,
    },
    /// Run a command in a sandbox with live output; its exit code becomes sbox's.
    Exec {
        #[command(flatten)]
        provider: ProviderArg,
        /// The sandbox id.
        id: String,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Run code in a sandbox's stateful interpreter: stdout and stderr stream through live, the
    /// result's text goes to stdout, an error's traceback to stderr with status 1.
    Code {
        #[command(flatten)]
        provider: ProviderArg,
        /// The sandbox id.
        id: String,
        /// A file of code to run, or - to read it from stdin.
        #[arg(value_name = "FILE", required_unless_present = "code")]
        file: Option<PathBuf>,
        /// The code to run (instead of FILE).
        #[arg(
            short = 'c',
            long = "code",
            value_name = "CODE",
            conflicts_with = "file"
        )]
        code: Option<String>,
        /// The code context to run in (default: the language's default context).
        #[arg(long, value_name = "ID")]
        context: Option<String>,
        /// The language: python (default), javascript, typescript, r, java, bash.
        #[arg(long, short = 'l')]
        language: Option<String>,
        /// How long the cell may run before it is interrupted (90s, 30m; default 300s).
        #[arg(long, value_parser = fleet::parse_duration)]
        timeout: Option<std::time::Duration>,
        /// Save the images the cell displays or returns in DIR (image-N.png, ...), printing
        /// each path on stderr.
        #[arg(long, value_name = "DIR")]
        save_images: Option<PathBuf>,
    },
    /// Copy a file between this machine and a sandbox; the sandbox side is `ID:path`.
    Cp {
        #[command(flatten)]
        provider: ProviderArg,
        /// Source: a local path or `ID:path`.
        src: String,
        /// Destination: a local path or `ID:path`.
        dst: String,
    },
    /// Destroy a sandbox.
    Rm {
        #[command(flatten)]
        provider: ProviderArg,
        /// The sandbox id.
        id: String,
    },
    /// Print a URL reaching a port in the sandbox (and the headers it needs).
    Preview {
        #[command(flatten)]
        provider: ProviderArg,
        /// The sandbox id.
        id: String,
        /// The port inside the sandbox.
        port: u16,
    },
    /// Destroy the owner's sandboxes that a rule picks (or, with --dry-run, only say which), and
    /// print what was done to each and why. Sandboxes without the owner's label are never
    /// touched; with no rule given nothing is destroyed.
    Reap {
        #[command(flatten)]
        provider: ProviderArg,
        #[command(flatten)]
        owner: OwnerArg,
        /// Only say what would be destroyed.
        #[arg(long)]
        dry_run: bool,
        /// Reap sandboxes created longer ago than this (90s, 30m, 12h, 7d).
        #[arg(long, value_parser = fleet::parse_duration)]
        max_age: Option<std::time::Duration>,
        /// Reap sandboxes idle longer than this, where the provider tracks activity.
        #[arg(long, value_parser = fleet::parse_duration)]
        max_idle: Option<std::time::Duration>,
        /// Reap sandboxes stopped or paused longer than this.
        #[arg(long, value_parser = fleet::parse_duration)]
        max_stopped: Option<std::time::Duration>,
        /// Reap failed sandboxes.
        #[arg(long)]
        failed: bool,
        /// Keep this sandbox and reap every other one of the owner (repeatable).
        #[arg(long = "keep", value_name = "ID")]
        keep: Vec<String>,
    },
    /// Print the shapes the provider offers within its limits, with their cost per hour
    /// running and stopped.
    Shapes {
        #[command(flatten)]
        provider: ProviderArg,
        /// A price table (the format of sandbox-core/prices.json) put over the shipped one.
        #[arg(long)]
        prices: Option<PathBuf>,
    },
    /// Print what each of the owner's sandboxes ran and cost so far (metered where the
    /// provider meters it, estimated otherwise).
    Usage {
        #[command(flatten)]
        provider: ProviderArg,
        #[command(flatten)]
        owner: OwnerArg,
        /// A price table put over the shipped one.
        #[arg(long)]
        prices: Option<PathBuf>,
    },
    /// Serve the agent tools over MCP: on stdin/stdout, or with --http over streamable HTTP.
    Mcp {
        #[command(flatten)]
        provider: ProviderArg,
        /// Bind the tools to this sandbox (otherwise the model creates or connects to one).
        #[arg(long)]
        sandbox: Option<String>,
        /// Offer only the read-only tools.
        #[arg(long)]
        read_only: bool,
        /// Serve over MCP's streamable HTTP transport on this address (for example
        /// 127.0.0.1:8765; port 0 picks a free one) instead of stdio; the endpoint's URL is
        /// printed on stdout. Clients must send `Authorization: Bearer <token>`: the token is
        /// made at start and printed once on stderr, unless --token-file gives it.
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        /// With --http, read the bearer token from this file (one word of at least 32 visible
        /// ASCII characters, in a file only you can read: chmod 600).
        #[arg(
            long,
            value_name = "PATH",
            requires = "http",
            conflicts_with = "no_auth"
        )]
        token_file: Option<PathBuf>,
        /// With --http, serve without authentication: any account or program on this machine
        /// can then run commands through the tools. Only on a loopback address.
        #[arg(long, requires = "http")]
        no_auth: bool,
        /// With --http, another Host header value to accept (name or name:port; repeatable).
        /// Loopback names and the bound address are always accepted.
        #[arg(long = "allow-host", value_name = "HOST", requires = "http")]
        allow_hosts: Vec<String>,
    },
}

/// A failure: the message printed, and the process status.
type Fail = String;

fn main() -> ExitCode {
    let cli = Cli::try_parse().unwrap_or_else(|e| {
        // Help and version go to stdout, which may be closed like any other output.
        if let Err(error) = e.print()
            && !e.use_stderr()
            && out::is_closed(&error)
        {
            out::exit_closed();
        }
        std::process::exit(e.exit_code())
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("sbox: error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("sbox: error: {}", escape_controls_in_lines(&message));
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<ExitCode, Fail> {
    match cli.command {
        Cmd::Caps(p) => {
            let caps = registry::capabilities(&p.provider)?.to_json();
            out::line(pretty(&caps))?;
        }
        Cmd::Create { provider, template } => {
            let registered = registry::provider(&provider.provider)?;
            let mut spec = CreateSpec::new();
            if let Some(template) = template {
                spec = spec.template(template);
            }
            let spec = fleet::owner(None, None)?
                .label(&spec)
                .map_err(|e| e.to_string())?;
            let sandbox = registered
                .provider()
                .create(&spec)
                .await
                .map_err(|e| e.to_string())?;
            out::line(escape_controls(sandbox.id()))?;
        }
        Cmd::Ls { provider, ours } => {
            let registered = registry::provider(&provider.provider)?;
            let filter = if ours {
                fleet::owner(None, None)?.filter()
            } else {
                ListFilter::new()
            };
            let infos = registered
                .provider()
                .list_all(&filter)
                .await
                .map_err(|e| e.to_string())?;
            for info in infos {
                out::line(format_args!(
                    "{}\t{}\t{}",
                    escape_controls(&info.id),
                    info.state.as_str(),
                    escape_controls(info.template.as_deref().unwrap_or("-"))
                ))?;
            }
        }
        Cmd::Exec {
            provider,
            id,
            command,
        } => {
            let sandbox = connect(&provider, &id).await?;
            return exec(sandbox.as_ref(), &command).await;
        }
        Cmd::Code {
            provider,
            id,
            file,
            code,
            context,
            language,
            timeout,
            save_images,
        } => {
            let code = code::source(code, file.as_deref()).await?;
            let sandbox = connect(&provider, &id).await?;
            let request = code::CodeRequest {
                code,
                context,
                language,
                timeout,
                save_images,
            };
            return code::run(sandbox.as_ref(), request).await;
        }
        Cmd::Cp { provider, src, dst } => {
            let registered = registry::provider(&provider.provider)?;
            copy(&registered, &src, &dst).await?;
        }
        Cmd::Rm { provider, id } => {
            let sandbox = connect(&provider, &id).await?;
            sandbox.destroy().await.map_err(|e| e.to_string())?;
        }
        Cmd::Preview { provider, id, port } => {
            let sandbox = connect(&provider, &id).await?;
            let link = sandbox
                .preview_link(port)
                .await
                .map_err(|e| e.to_string())?;
            out::line(escape_controls(&link.url))?;
            for (name, value) in &link.headers {
                out::line(format_args!(
                    "{}: {}",
                    escape_controls(name),
                    escape_controls(value)
                ))?;
            }
        }
        Cmd::Reap {
            provider,
            owner,
            dry_run,
            max_age,
            max_idle,
            max_stopped,
            failed,
            keep,
        } => {
            let registered = registry::provider(&provider.provider)?;
            let mut policy = ReapPolicy::new().dry_run(dry_run);
            policy.max_age = max_age;
            policy.max_idle = max_idle;
            policy.max_stopped = max_stopped;
            policy.failed = failed;
            if !keep.is_empty() {
                policy = policy.keep_only(keep);
            }
            if max_age.is_none()
                && max_idle.is_none()
                && max_stopped.is_none()
                && !failed
                && policy.keep.is_none()
            {
                eprintln!(
                    "sbox: no rule given (--max-age, --max-idle, --max-stopped, --failed, --keep): nothing will be reaped"
                );
            }
            let (table, clean) =
                fleet::reap(registered.provider(), &owner.owner()?, &policy).await?;
            out::text(&escape_controls_in_lines(&table))?;
            if !clean {
                return Ok(ExitCode::FAILURE);
            }
        }
        Cmd::Shapes { provider, prices } => {
            let prices = fleet::prices(prices.as_deref())?;
            let table = fleet::shapes(&provider.provider, &prices).await?;
            out::text(&escape_controls_in_lines(&table))?;
        }
        Cmd::Usage {
            provider,
            owner,
            prices,
        } => {
            let registered = registry::provider(&provider.provider)?;
            let prices = fleet::prices(prices.as_deref())?;
            let table = fleet::usage(registered.provider(), &owner.owner()?, prices).await?;
            out::text(&escape_controls_in_lines(&table))?;
        }
        Cmd::Mcp {
            provider,
            sandbox,
            read_only,
            http,
            allow_hosts,
            token_file,
            no_auth,
        } => {
            // Before anything else, so a bad token file fails fast and names itself.
            let http = match http {
                None => None,
                Some(addr) => Some((
                    addr,
                    match (no_auth, &token_file) {
                        (true, _) => mcp::http::Auth::None,
                        (false, Some(path)) => mcp::http::Auth::Bearer {
                            token: mcp::http::Token::from_file(path)?,
                            announce: false,
                        },
                        (false, None) => mcp::http::Auth::Bearer {
                            token: mcp::http::Token::generate()?,
                            announce: true,
                        },
                    },
                )),
            };
            let registered = registry::provider(&provider.provider)?;
            let config = ToolConfig {
                read_only,
                ..ToolConfig::default()
            };
            let bound = match &sandbox {
                Some(id) => Some(
                    registered
                        .connect(id)
                        .await
                        .map_err(|e| format!("cannot connect to {id}: {e}"))?,
                ),
                None => None,
            };
            let instructions = match &sandbox {
                Some(id) => format!("Tools over sandbox {id} of provider {}.", provider.provider),
                None => format!(
                    "Tools over sandboxes of provider {}: call sandbox_create_v1 (or \
                     sandbox_connect_v1) first; the other tools act on the current sandbox \
                     (requests without an MCP session have none: they pass sandbox_id).",
                    provider.provider
                ),
            };
            let provider = registered.provider();
            let make: mcp::MakeTools = Box::new(move |clients| {
                let config = ToolConfig {
                    implicit_sandbox: clients == mcp::Clients::Session,
                    ..config.clone()
                };
                let mut builder = ToolSet::builder().provider(provider.clone()).config(config);
                if let Some(sandbox) = &bound {
                    builder = builder.sandbox(sandbox.clone());
                }
                builder.build()
            });
            let server = mcp::ToolServer::new(make, instructions)?;
            match http {
                Some((addr, auth)) => mcp::http::serve(server, addr, &allow_hosts, auth).await?,
                None => server.serve_stdio().await?,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn pretty(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

async fn connect(provider: &ProviderArg, id: &str) -> Result<Arc<dyn Sandbox>, Fail> {
    registry::provider(&provider.provider)?
        .connect(id)
        .await
        .map_err(|e| e.to_string())
}

/// Runs `argv`, copying stdout and stderr through as they come; the exit code becomes sbox's
/// (128 + the signal for a process killed by one, as shells report it). Ctrl-C kills the
/// command in the sandbox and exits with 130.
async fn exec(sandbox: &dyn Sandbox, argv: &[String]) -> Result<ExitCode, Fail> {
    let (program, args) = argv.split_first().ok_or("no command given")?;
    let command = Command::new(program.clone()).args(args.iter().cloned());
    // Listen before the command starts, so a Ctrl-C at any moment reaches the handler below
    // rather than ending sbox with the command left running.
    let interrupted = interrupt()?;
    tokio::pin!(interrupted);
    let mut process = sandbox.exec(&command).await.map_err(|e| e.to_string())?;
    let (mut stdout, mut stderr) = (tokio::io::stdout(), tokio::io::stderr());
    loop {
        let event = tokio::select! {
            event = process.next_event() => event,
            _ = &mut interrupted => {
                // Stop the command in the sandbox too, not only this client, and exit as a
                // shell does for SIGINT.
                let _ = process.kill().await;
                eprintln!("sbox: interrupted; the command was killed");
                return Ok(ExitCode::from(130));
            }
        };
        let Some(event) = event else { break };
        let written = match event.map_err(|e| e.to_string())? {
            ProcessEvent::Stdout(chunk) => write_through(&mut stdout, &chunk).await,
            ProcessEvent::Stderr(chunk) => write_through(&mut stderr, &chunk).await,
            ProcessEvent::Exit(status) => {
                let code = match (status.code, status.signal) {
                    (Some(code), _) => code,
                    (None, Some(signal)) => 128 + signal,
                    (None, None) => 1,
                };
                return Ok(ExitCode::from(code.clamp(0, 255) as u8));
            }
        };
        if let Err(e) = written {
            // Nobody reads the output any more (`sbox exec ... | head`): stop the command, as
            // SIGPIPE would stop it on this machine, then end quietly (see `out`).
            let _ = process.kill().await;
            return Err(out::failed(e));
        }
    }
    Err("the command's output ended without an exit status".to_owned())
}

/// Resolves at the first SIGINT (Ctrl-C); the handler is in place when this returns.
#[cfg(unix)]
fn interrupt() -> Result<impl std::future::Future<Output = ()>, Fail> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut listener =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot listen for Ctrl-C: {e}"))?;
    Ok(async move {
        listener.recv().await;
    })
}

/// Resolves at the first Ctrl-C.
#[cfg(not(unix))]
fn interrupt() -> Result<impl std::future::Future<Output = ()>, Fail> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}

/// Writes `chunk` to `out` at once; the caller decides what a failure means (see
/// [`out::failed`]).
async fn write_through(
    out: &mut (impl AsyncWriteExt + Unpin),
    chunk: &[u8],
) -> std::io::Result<()> {
    out.write_all(chunk).await?;
    out.flush().await
}

/// One side of a copy.
#[derive(Debug, PartialEq, Eq)]
enum Place<'a> {
    Host(&'a str),
    Sandbox { id: &'a str, path: &'a str },
}

/// `ID:path` is a sandbox path when `ID` is not empty and holds no `/` (so `./a:b` and
/// `/tmp/a:b` stay host paths).
fn place(arg: &str) -> Place<'_> {
    match arg.split_once(':') {
        Some((id, path)) if !id.is_empty() && !id.contains('/') && !path.is_empty() => {
            Place::Sandbox { id, path }
        }
        _ => Place::Host(arg),
    }
}

/// Copies one file, streaming: an upload reads the host file as it is sent, a download writes
/// chunks as they arrive (to a temporary name, renamed into place once complete). Large copies
/// show a progress line on a terminal.
async fn copy(registered: &Registered, src: &str, dst: &str) -> Result<(), Fail> {
    match (place(src), place(dst)) {
        (Place::Host(from), Place::Sandbox { id, path }) => {
            let sandbox = registered.connect(id).await.map_err(|e| e.to_string())?;
            let file = tokio::fs::File::open(from)
                .await
                .map_err(|e| format!("cannot open {from}: {e}"))?;
            let total = file.metadata().await.ok().map(|m| m.len());
            let body = progress::Counting::new(file, progress::Progress::new(from, total));
            let transfer = sandbox
                .upload(path, Box::pin(body))
                .await
                .map_err(|e| e.to_string())?;
            eprintln!(
                "sbox: copied {} bytes to {}:{}",
                transfer.bytes,
                escape_controls(id),
                escape_controls(path)
            );
        }
        (Place::Sandbox { id, path }, Place::Host(to)) => {
            let sandbox = registered.connect(id).await.map_err(|e| e.to_string())?;
            let mut stream = sandbox
                .download(path)
                .await
                .map_err(|e| e.to_string())?
                .into_stream();
            let (partial, file) = partial_file(Path::new(to))?;
            let mut file = tokio::fs::File::from_std(file);
            let shown_partial = partial.display().to_string();
            let mut bytes = 0u64;
            let mut shown = progress::Progress::new(format!("{id}:{path}"), None);
            let copied: Result<(), Fail> = async {
                while let Some(chunk) = stream.next().await {
                    let chunk = chunk.map_err(|e| e.to_string())?;
                    bytes += chunk.len() as u64;
                    shown.advance(chunk.len() as u64);
                    file.write_all(&chunk)
                        .await
                        .map_err(|e| format!("cannot write {shown_partial}: {e}"))?;
                }
                file.flush()
                    .await
                    .map_err(|e| format!("cannot write {shown_partial}: {e}"))
            }
            .await;
            shown.finish();
            drop(file);
            // On an error the partial file is removed as `partial` drops.
            copied?;
            partial
                .persist(to)
                .map_err(|e| format!("cannot move {shown_partial} to {to}: {}", e.error))?;
            eprintln!(
                "sbox: copied {bytes} bytes from {}:{}",
                escape_controls(id),
                escape_controls(path)
            );
        }
        (Place::Sandbox { .. }, Place::Sandbox { .. }) => {
            return Err("both sides are in a sandbox: copy through this machine".to_owned());
        }
        (Place::Host(_), Place::Host(_)) => {
            return Err("neither side is in a sandbox: write one as ID:path".to_owned());
        }
    }
    Ok(())
}

/// A new file beside `to` for a download to be written into before it is renamed over `to`:
/// created exclusively under an unpredictable name (`.NAME.XXXXXX.sbox-partial`), so a file or
/// link someone else planted in the destination directory is never opened or written through.
/// Its mode is what a plain create would give (0666 less the umask), not a temporary file's
/// 0600. The file is removed when the returned handle drops without being persisted.
fn partial_file(to: &Path) -> Result<(tempfile::TempPath, std::fs::File), Fail> {
    let dir = match to.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = to
        .file_name()
        .ok_or_else(|| format!("{} does not name a file", to.display()))?;
    let mut builder = tempfile::Builder::new();
    let prefix = format!(".{}.", name.to_string_lossy());
    builder.prefix(&prefix).suffix(".sbox-partial");
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let file = builder
        .tempfile_in(dir)
        .map_err(|e| format!("cannot create a file in {}: {e}", dir.display()))?;
    let (file, path) = file.into_parts();
    Ok((path, file))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_provider_option_names_every_provider_of_the_registry() {
        let all = sandbox_sdk::ALL_PROVIDERS.join(", ");
        let cli = Cli::command();
        assert!(cli.get_about().unwrap().to_string().contains(&all));
        let mut seen = 0;
        for command in cli.get_subcommands() {
            for arg in command.get_arguments().filter(|a| a.get_id() == "provider") {
                let help = arg.get_help().unwrap().to_string();
                assert!(help.contains(&all), "{}: {help}", command.get_name());
                seen += 1;
            }
        }
        assert!(seen >= 12, "{seen}");
    }

    #[test]
    fn sandbox_paths_are_id_colon_path() {
        assert_eq!(
            place("abc:/work/x"),
            Place::Sandbox {
                id: "abc",
                path: "/work/x"
            }
        );
        assert_eq!(place("./a:b"), Place::Host("./a:b"));
        assert_eq!(place("/tmp/a:b"), Place::Host("/tmp/a:b"));
        assert_eq!(place(":x"), Place::Host(":x"));
        assert_eq!(place("plain.txt"), Place::Host("plain.txt"));
    }
}
