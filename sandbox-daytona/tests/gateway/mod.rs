//! A stand-in for Daytona's SSH gateway (PROTOCOL.md §5) shared by one test binary: russh's
//! server side on loopback, started once on its own thread and runtime (each generated test
//! has its own runtime), accepting auth method `none` for any user and checking the user name
//! as an access token only when a session channel is opened (an unknown token drops the
//! connection, as the gateway does).
//!
//! Commands run as real local processes (`sh -c LINE`) in a private directory under the
//! target's temporary directory, so exit codes, stdout and stderr apart, stdin with end of
//! file, signals and timeouts are real. A `pty-req` gets a real terminal: the line runs under
//! util-linux `script` after `stty` set the requested size.

use russh::keys::PrivateKey;
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::server::{Auth, Msg, Server as _, Session};
use russh::{Channel, ChannelId, CryptoVec};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The only token the gateway accepts (what the cassettes' `ssh-access` answers hand out).
pub const TOKEN: &str = "ssh-token-example";

/// The gateway's loopback port, starting it on first use.
pub fn port() -> u16 {
    static PORT: OnceLock<u16> = OnceLock::new();
    *PORT.get_or_init(start)
}

fn start() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the SSH gateway");
    let port = listener.local_addr().expect("gateway address").port();
    listener
        .set_nonblocking(true)
        .expect("non-blocking gateway socket");
    remove_stale_homes();
    let home = tempfile::Builder::new()
        .prefix(HOME_PREFIX)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("gateway home directory");
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
                let config = Arc::new(russh::server::Config {
                    keys: vec![PrivateKey::from(Ed25519Keypair::from_seed(&[9u8; 32]))],
                    auth_rejection_time: Duration::from_millis(1),
                    auth_rejection_time_initial: Some(Duration::ZERO),
                    ..Default::default()
                });
                let mut gateway = Gateway {
                    home: Arc::new(home.path().to_owned()),
                };
                gateway.run_on_socket(config, &listener).await.ok();
                drop(home);
            });
        })
        .expect("gateway thread");
    port
}

const HOME_PREFIX: &str = "daytona-ssh-gateway-";

/// The gateway's home lives as long as the test process, which never drops it: homes left by
/// earlier runs (older than an hour, so no running binary still uses them) are removed.
fn remove_stale_homes() {
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
}

#[derive(Clone)]
struct Gateway {
    home: Arc<PathBuf>,
}

struct Conn {
    home: Arc<PathBuf>,
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
            home: self.home.clone(),
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
        Ok(Auth::Accept)
    }

    async fn auth_password(&mut self, _: &str, _: &str) -> Result<Auth, Self::Error> {
        Ok(Auth::reject())
    }

    async fn channel_open_session(
        &mut self,
        _channel: Channel<Msg>,
        _session: &mut Session,
    ) -> Result<bool, Self::Error> {
        if self.user != TOKEN {
            return Err(russh::Error::Disconnect);
        }
        Ok(true)
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
        self.pty.insert(channel, (cols, rows));
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
        cmd.current_dir(self.home.as_path())
            .env("HOME", self.home.as_path())
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
                            .data(channel, CryptoVec::from_slice(&buf[..n]))
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
                            .extended_data(channel, 1, CryptoVec::from_slice(&buf[..n]))
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
