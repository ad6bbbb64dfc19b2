//! A stand-in for Daytona's SSH gateway (PROTOCOL.md §10): russh's server side on loopback,
//! accepting auth method `none` for any user and checking the user name as an access token
//! only when a session channel is opened (an unknown token drops the connection, as the
//! gateway does).
//!
//! [`port`] is the one gateway a test binary shares, started once on its own thread and
//! runtime (each generated test has its own runtime) and knowing [`TOKEN`];
//! [`Gateway::spawn`] starts one on the calling test's runtime, with its own tokens and,
//! if asked, a record of what it saw ([`Seen`]).
//!
//! Commands run as real local processes (`sh -c LINE`) in a private directory under the
//! target's temporary directory, so exit codes, stdout and stderr apart, stdin with end of
//! file, signals and timeouts are real. A `pty-req` gets a real terminal: the line runs under
//! util-linux `script` after `stty` set the requested size.
#![allow(dead_code)]

use bytes::Bytes;
use russh::keys::PrivateKey;
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::server::{Auth, ChannelOpenHandle, Msg, Server as _, Session};
use russh::{Channel, ChannelId};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The token the shared gateway accepts (what the cassettes' `ssh-access` answers hand out).
pub const TOKEN: &str = "ssh-token-example";

/// The shared gateway's loopback port, starting it on first use.
pub fn port() -> u16 {
    static PORT: OnceLock<u16> = OnceLock::new();
    *PORT.get_or_init(start_shared)
}

/// The gateway's host key.
pub fn host_key() -> PrivateKey {
    PrivateKey::from(Ed25519Keypair::from_seed(&[9u8; 32]))
}

/// The SHA-256 fingerprint of [`host_key`] (`SHA256:…`), what a client pins.
pub fn fingerprint() -> String {
    host_key()
        .public_key()
        .fingerprint(russh::keys::HashAlg::Sha256)
        .to_string()
}

fn start_shared() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the SSH gateway");
    let port = listener.local_addr().expect("gateway address").port();
    listener
        .set_nonblocking(true)
        .expect("non-blocking gateway socket");
    let gateway = Gateway::new([TOKEN]);
    std::thread::Builder::new()
        .name("ssh-gateway".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("gateway runtime");
            runtime.block_on(async move {
                let listener =
                    tokio::net::TcpListener::from_std(listener).expect("gateway listener");
                gateway.serve(listener).await;
            });
        })
        .expect("gateway thread");
    port
}

/// What a recording gateway saw, in order.
#[derive(Debug, Default)]
pub struct Seen {
    /// User names offered with auth method `none` (the tokens).
    pub users: Vec<String>,
    /// `(cols, rows)` of each `pty-req`.
    pub ptys: Vec<(u32, u32)>,
    /// `(cols, rows)` of each `window-change`.
    pub resizes: Vec<(u32, u32)>,
    /// Each `exec` line.
    pub commands: Vec<String>,
    /// How many `signal` requests came.
    pub signals: usize,
}

/// One gateway: the tokens it accepts, its commands' home and, if asked, what it saw.
#[derive(Clone)]
pub struct Gateway {
    tokens: Arc<HashSet<String>>,
    home: Arc<TempDir>,
    seen: Option<Arc<Mutex<Seen>>>,
}

impl Gateway {
    /// A gateway that accepts `tokens` and keeps no record.
    pub fn new<const N: usize>(tokens: [&str; N]) -> Self {
        remove_stale_homes();
        let home = tempfile::Builder::new()
            .prefix(HOME_PREFIX)
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("gateway home directory");
        Self {
            tokens: Arc::new(tokens.into_iter().map(str::to_owned).collect()),
            home: Arc::new(home),
            seen: None,
        }
    }

    /// The same gateway, recording what it sees (read with [`Gateway::seen`]).
    pub fn recording(mut self) -> Self {
        self.seen = Some(Arc::default());
        self
    }

    /// What it saw so far.
    ///
    /// # Panics
    /// If it was not made [`Gateway::recording`].
    pub fn seen(&self) -> MutexGuard<'_, Seen> {
        self.seen
            .as_ref()
            .expect("a recording gateway")
            .lock()
            .unwrap()
    }

    /// Serves on a loopback port on the calling runtime (it ends with that runtime) and
    /// returns the port.
    pub async fn spawn(&self) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the SSH gateway");
        let port = listener.local_addr().expect("gateway address").port();
        tokio::spawn(self.clone().serve(listener));
        port
    }

    async fn serve(mut self, listener: tokio::net::TcpListener) {
        let config = Arc::new(russh::server::Config {
            keys: vec![host_key()],
            auth_rejection_time: Duration::from_millis(1),
            auth_rejection_time_initial: Some(Duration::ZERO),
            ..Default::default()
        });
        self.run_on_socket(config, &listener).await.ok();
    }

    fn record(&self, what: impl FnOnce(&mut Seen)) {
        if let Some(seen) = &self.seen {
            what(&mut seen.lock().unwrap());
        }
    }
}

const HOME_PREFIX: &str = "daytona-ssh-gateway-";

/// The shared gateway's home lives as long as the test process, which never drops it: homes
/// left by earlier runs (older than an hour, so no running binary still uses them) are removed.
fn remove_stale_homes() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let Ok(entries) = std::fs::read_dir(env!("CARGO_TARGET_TMPDIR")) else {
            return;
        };
        let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        for entry in entries.flatten() {
            let stale = entry.file_name().to_string_lossy().starts_with(HOME_PREFIX)
                && entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|at| at < hour_ago);
            if stale {
                std::fs::remove_dir_all(entry.path()).ok();
            }
        }
    });
}

/// One connection's state.
pub struct Conn {
    gateway: Gateway,
    user: String,
    stdin: HashMap<ChannelId, tokio::process::ChildStdin>,
    /// Dropping a sender (the connection closing) kills the command too.
    kill: HashMap<ChannelId, tokio::sync::oneshot::Sender<()>>,
    pty: HashMap<ChannelId, (u32, u32)>,
}

impl russh::server::Server for Gateway {
    type Handler = Conn;
    fn new_client(&mut self, _: Option<std::net::SocketAddr>) -> Conn {
        Conn {
            gateway: self.clone(),
            user: String::new(),
            stdin: HashMap::new(),
            kill: HashMap::new(),
            pty: HashMap::new(),
        }
    }
}

/// `'…'` around `text`, for a POSIX shell.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

impl russh::server::Handler for Conn {
    type Error = russh::Error;

    async fn auth_none(&mut self, user: &str) -> Result<Auth, Self::Error> {
        self.user = user.to_owned();
        self.gateway.record(|seen| seen.users.push(user.to_owned()));
        Ok(Auth::Accept)
    }

    async fn auth_password(&mut self, _: &str, _: &str) -> Result<Auth, Self::Error> {
        Ok(Auth::reject())
    }

    async fn channel_open_session(
        &mut self,
        _channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        if !self.gateway.tokens.contains(&self.user) {
            return Err(russh::Error::Disconnect);
        }
        reply.accept().await;
        Ok(())
    }

    async fn pty_request(
        &mut self,
        channel: ChannelId,
        _term: &str,
        cols: u32,
        rows: u32,
        _: u32,
        _: u32,
        _: &[(russh::Pty, u32)],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.gateway.record(|seen| seen.ptys.push((cols, rows)));
        self.pty.insert(channel, (cols, rows));
        session.channel_success(channel)?;
        Ok(())
    }

    /// Recorded and acknowledged (the terminal keeps its first size).
    async fn window_change_request(
        &mut self,
        channel: ChannelId,
        cols: u32,
        rows: u32,
        _: u32,
        _: u32,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.gateway.record(|seen| seen.resizes.push((cols, rows)));
        session.channel_success(channel)?;
        Ok(())
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let line = String::from_utf8_lossy(data).into_owned();
        self.gateway.record(|seen| seen.commands.push(line.clone()));
        let mut cmd = match self.pty.get(&channel) {
            Some((cols, rows)) => {
                let mut cmd = tokio::process::Command::new("script");
                cmd.arg("-qec")
                    .arg(format!(
                        "stty cols {cols} rows {rows}; sh -c {}",
                        quote(&line)
                    ))
                    .arg("/dev/null");
                cmd
            }
            None => {
                let mut cmd = tokio::process::Command::new("sh");
                cmd.arg("-c").arg(&line);
                cmd
            }
        };
        let home: &Path = self.gateway.home.path();
        cmd.current_dir(home)
            .env("HOME", home)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(russh::Error::IO)?;
        if let Some(stdin) = child.stdin.take() {
            self.stdin.insert(channel, stdin);
        }
        let (kill_tx, kill_rx) = tokio::sync::oneshot::channel();
        self.kill.insert(channel, kill_tx);
        let handle = session.handle();
        session.channel_success(channel)?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        tokio::spawn(async move {
            let h1 = handle.clone();
            let out = tokio::spawn(async move {
                let Some(mut stdout) = stdout else { return };
                let mut buf = [0u8; 1024];
                while let Ok(n) = stdout.read(&mut buf).await {
                    if n == 0
                        || h1
                            .data(channel, Bytes::copy_from_slice(&buf[..n]))
                            .await
                            .is_err()
                    {
                        break;
                    }
                }
            });
            let h2 = handle.clone();
            let err = tokio::spawn(async move {
                let Some(mut stderr) = stderr else { return };
                let mut buf = [0u8; 1024];
                while let Ok(n) = stderr.read(&mut buf).await {
                    if n == 0
                        || h2
                            .extended_data(channel, 1, Bytes::copy_from_slice(&buf[..n]))
                            .await
                            .is_err()
                    {
                        break;
                    }
                }
            });
            let status = tokio::select! {
                status = child.wait() => status.ok().and_then(|s| s.code()),
                _ = kill_rx => { child.kill().await.ok(); None }
            };
            out.await.ok();
            err.await.ok();
            match status {
                Some(code) => {
                    handle.exit_status_request(channel, code as u32).await.ok();
                }
                None => {
                    handle
                        .exit_signal_request(
                            channel,
                            russh::Sig::KILL,
                            false,
                            String::new(),
                            String::new(),
                        )
                        .await
                        .ok();
                }
            }
            handle.eof(channel).await.ok();
            handle.close(channel).await.ok();
        });
        Ok(())
    }

    async fn data(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        _: &mut Session,
    ) -> Result<(), Self::Error> {
        if let Some(stdin) = self.stdin.get_mut(&channel) {
            stdin.write_all(data).await.map_err(russh::Error::IO)?;
        }
        Ok(())
    }

    async fn channel_eof(
        &mut self,
        channel: ChannelId,
        _: &mut Session,
    ) -> Result<(), Self::Error> {
        self.stdin.remove(&channel);
        Ok(())
    }

    async fn signal(
        &mut self,
        channel: ChannelId,
        _sig: russh::Sig,
        _: &mut Session,
    ) -> Result<(), Self::Error> {
        self.gateway.record(|seen| seen.signals += 1);
        if let Some(kill) = self.kill.remove(&channel) {
            kill.send(()).ok();
        }
        Ok(())
    }

    async fn channel_close(
        &mut self,
        channel: ChannelId,
        _: &mut Session,
    ) -> Result<(), Self::Error> {
        self.stdin.remove(&channel);
        if let Some(kill) = self.kill.remove(&channel) {
            kill.send(()).ok();
        }
        Ok(())
    }
}
