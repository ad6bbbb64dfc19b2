//! Exec over SSH against a real SSH server started in-process on loopback (russh's server side)
//! that behaves like Daytona's gateway (PROTOCOL.md §5): auth method `none` accepted for any
//! user, the user name checked as an access token only after the handshake, and a bad token or
//! a sandbox that is not started answered by closing the connection. Accepted commands run as
//! real local processes, so stdout, stderr, stdin and exit codes are real.

mod common;

use common::*;
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::{HashAlg, PrivateKey};
use russh::server::{Auth, Msg, Server as _, Session};
use russh::{Channel, ChannelId, CryptoVec};
use sandbox_daytona::{DaytonaBuilder, ExecTransport};
use sandbox_sdk_core::{Command, ErrorKind, PtySize, Sandbox, SandboxExt};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const GOOD: &str = "Fg8Jx2nPtWAVY5pVN0TlUcbCDNPFqePB";

#[derive(Default)]
struct Seen {
    users: Vec<String>,
    ptys: Vec<(u32, u32)>,
    resizes: Vec<(u32, u32)>,
    commands: Vec<String>,
    signals: usize,
}

#[derive(Clone)]
struct Gateway {
    tokens: Arc<Mutex<HashSet<String>>>,
    seen: Arc<Mutex<Seen>>,
}

struct Conn {
    gw: Gateway,
    user: String,
    channels: HashMap<ChannelId, Channel<Msg>>,
    stdin: HashMap<ChannelId, tokio::process::ChildStdin>,
    kill: HashMap<ChannelId, tokio::sync::oneshot::Sender<()>>,
    pty: HashMap<ChannelId, (u32, u32)>,
}

impl russh::server::Server for Gateway {
    type Handler = Conn;
    fn new_client(&mut self, _: Option<std::net::SocketAddr>) -> Conn {
        Conn {
            gw: self.clone(),
            user: String::new(),
            channels: HashMap::new(),
            stdin: HashMap::new(),
            kill: HashMap::new(),
            pty: HashMap::new(),
        }
    }
}

impl russh::server::Handler for Conn {
    type Error = russh::Error;

    async fn auth_none(&mut self, user: &str) -> Result<Auth, Self::Error> {
        // Like the gateway: NoClientAuth, the token is checked later.
        self.user = user.to_owned();
        self.gw.seen.lock().unwrap().users.push(user.to_owned());
        Ok(Auth::Accept)
    }

    async fn auth_password(&mut self, _: &str, _: &str) -> Result<Auth, Self::Error> {
        Ok(Auth::reject())
    }

    async fn channel_open_session(
        &mut self,
        channel: Channel<Msg>,
        _session: &mut Session,
    ) -> Result<bool, Self::Error> {
        if !self.gw.tokens.lock().unwrap().contains(&self.user) {
            // An invalid or expired token: the gateway just drops the connection.
            return Err(russh::Error::Disconnect);
        }
        self.channels.insert(channel.id(), channel);
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
        self.gw.seen.lock().unwrap().ptys.push((cols, rows));
        self.pty.insert(channel, (cols, rows));
        session.channel_success(channel)?;
        Ok(())
    }

    async fn window_change_request(
        &mut self,
        channel: ChannelId,
        cols: u32,
        rows: u32,
        _: u32,
        _: u32,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.gw.seen.lock().unwrap().resizes.push((cols, rows));
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
        self.gw.seen.lock().unwrap().commands.push(line.clone());
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c").arg(&line);
        if let Some((cols, rows)) = self.pty.get(&channel) {
            // No real pty here: the size is handed to the command as the usual variables.
            cmd.env("COLUMNS", cols.to_string())
                .env("LINES", rows.to_string());
        }
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(russh::Error::IO)?;
        self.stdin.insert(channel, child.stdin.take().unwrap());
        let (kill_tx, kill_rx) = tokio::sync::oneshot::channel();
        self.kill.insert(channel, kill_tx);
        let handle = session.handle();
        session.channel_success(channel)?;
        let mut stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let h1 = handle.clone();
            let out = tokio::spawn(async move {
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
        self.gw.seen.lock().unwrap().signals += 1;
        if let Some(kill) = self.kill.remove(&channel) {
            kill.send(()).ok();
        }
        Ok(())
    }
}

fn host_key() -> PrivateKey {
    PrivateKey::from(Ed25519Keypair::from_seed(&[7u8; 32]))
}

struct Fixture {
    api: MockServer,
    port: u16,
    gw: Gateway,
    /// A sandbox id of this test alone: tokens are cached per API URL and sandbox for the whole
    /// process, and wiremock reuses its servers' URLs between tests.
    id: &'static str,
}

async fn fixture(state: &str, id: &'static str) -> Fixture {
    let gw = Gateway {
        tokens: Arc::new(Mutex::new([GOOD.to_owned()].into_iter().collect())),
        seen: Arc::default(),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = Arc::new(russh::server::Config {
        keys: vec![host_key()],
        auth_rejection_time: Duration::from_millis(1),
        auth_rejection_time_initial: Some(Duration::ZERO),
        ..Default::default()
    });
    let mut server = gw.clone();
    tokio::spawn(async move {
        server.run_on_socket(config, &listener).await.ok();
    });
    let api = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("/api/sandbox/{id}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(sandbox(id, state)))
        .mount(&api)
        .await;
    Fixture { api, port, gw, id }
}

async fn mint_answers(f: &Fixture, token: &str, times: u64) {
    Mock::given(method("POST"))
        .and(path(format!("/api/sandbox/{}/ssh-access", f.id).as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "a1", "sandboxId": f.id, "token": token,
            "expiresAt": "2099-01-01T00:00:00.000Z", "createdAt": "2026-08-20T10:00:00.000Z", "updatedAt": "2026-08-20T10:00:00.000Z",
            "sshCommand": format!("ssh -p {} {token}@127.0.0.1", f.port)
        })))
        .expect(times)
        .mount(&f.api)
        .await;
}

fn builder(f: &Fixture) -> DaytonaBuilder {
    common::builder(&f.api).exec_transport(ExecTransport::Ssh)
}

#[tokio::test]
async fn exec_over_ssh_keeps_streams_exit_code_and_bytes_exact() {
    let f = fixture("started", "sb-exec_over_ssh_keeps_").await;
    mint_answers(&f, GOOD, 1).await;
    let provider = builder(&f).build().unwrap();
    use sandbox_sdk_core::Provider;
    let caps = provider.capabilities();
    assert!(caps.stdin.is_available() && caps.pty.is_available() && caps.streaming.is_available());
    let sandbox = provider.get(f.id).await.unwrap();
    let out = sandbox
        .run(&Command::shell("printf out; printf err >&2; exit 3"))
        .await
        .unwrap();
    assert_eq!(out.stdout_lossy(), "out");
    assert_eq!(out.stderr_lossy(), "err");
    assert_eq!(out.status.code, Some(3));
    // cwd and env are folded into the line; the token is reused (one mint, expect(1)).
    let out = sandbox
        .run(
            &Command::shell("printf '%s' \"$V\"")
                .env("V", "it's $x")
                .cwd("/"),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout_lossy(), "it's $x");
    let seen = f.gw.seen.lock().unwrap();
    assert_eq!(seen.users, [GOOD, GOOD], "auth none with the token as user");
}

#[tokio::test]
async fn stdin_reaches_the_command_and_eof_ends_it() {
    let f = fixture("started", "sb-stdin_reaches_the_co").await;
    mint_answers(&f, GOOD, 1).await;
    let sandbox = builder(&f).build().unwrap().get(f.id).await.unwrap();
    let mut process = sandbox.exec(&Command::new("cat").stdin()).await.unwrap();
    let mut stdin = process.take_stdin().unwrap();
    stdin.write_all(b"line one\nline two\n").await.unwrap();
    stdin.shutdown().await.unwrap();
    let out = process.output().await.unwrap();
    assert_eq!(out.stdout_lossy(), "line one\nline two\n");
    assert_eq!(out.status.code, Some(0));
}

#[tokio::test]
async fn pty_size_and_resize_are_relayed() {
    let f = fixture("started", "sb-pty_size_and_resize_").await;
    mint_answers(&f, GOOD, 1).await;
    let sandbox = builder(&f).build().unwrap().get(f.id).await.unwrap();
    let mut process = sandbox
        .exec(
            &Command::shell("printf '%s %s' \"$LINES\" \"$COLUMNS\"; read x")
                .stdin()
                .pty(PtySize {
                    cols: 100,
                    rows: 30,
                }),
        )
        .await
        .unwrap();
    process
        .resize(PtySize {
            cols: 120,
            rows: 40,
        })
        .await
        .unwrap();
    let mut stdin = process.take_stdin().unwrap();
    stdin.write_all(b"go\n").await.unwrap();
    let out = process.output().await.unwrap();
    assert_eq!(out.stdout_lossy(), "30 100");
    let seen = f.gw.seen.lock().unwrap();
    assert_eq!(seen.ptys, [(100, 30)]);
    assert_eq!(seen.resizes, [(120, 40)]);
}

#[tokio::test]
async fn kill_signals_and_the_process_ends_without_success() {
    let f = fixture("started", "sb-kill_signals_and_the").await;
    mint_answers(&f, GOOD, 1).await;
    let sandbox = builder(&f).build().unwrap().get(f.id).await.unwrap();
    let process = sandbox
        .exec(&Command::new("sleep").arg("30"))
        .await
        .unwrap();
    process.kill().await.unwrap();
    let status = process.wait().await.unwrap();
    assert!(!status.success());
    assert_eq!(status.signal, Some(9));
    // The gateway got the signal (give its handler a moment to run).
    for _ in 0..200 {
        if f.gw.seen.lock().unwrap().signals == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(f.gw.seen.lock().unwrap().signals, 1);
}

#[tokio::test]
async fn an_expired_token_is_unauthorized_after_a_check_and_is_forgotten() {
    let f = fixture("started", "sb-an_expired_token_is_").await;
    // The API hands out a token the gateway does not know (expired or revoked).
    mint_answers(&f, "expiredTokenAAAAAAAAAAAAAAAAAAAA", 2).await;
    let sandbox = builder(&f).build().unwrap().get(f.id).await.unwrap();
    let err = sandbox.run(&Command::new("true")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    assert!(!format!("{err} {err:?}").contains("expiredToken"));
    // The refused token was dropped from the cache: the next exec mints again (expect(2)).
    let err = sandbox.run(&Command::new("true")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
}

#[tokio::test]
async fn a_sandbox_that_is_not_started_is_not_running() {
    let f = fixture("stopped", "sb-a_sandbox_that_is_no").await;
    mint_answers(&f, "tokenForAStoppedSandboxXXXXXXXXX", 1).await;
    let sandbox = builder(&f).build().unwrap().get(f.id).await.unwrap();
    let err = sandbox.run(&Command::new("true")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotRunning, "{err}");
}

#[tokio::test]
async fn a_pinned_host_key_that_differs_is_refused() {
    let f = fixture("started", "sb-a_pinned_host_key_th").await;
    mint_answers(&f, GOOD, 1).await;
    let sandbox = builder(&f)
        .ssh_host_key("SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
        .build()
        .unwrap()
        .get(f.id)
        .await
        .unwrap();
    let err = sandbox.run(&Command::new("true")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    assert!(err.message().contains("host key"));
    // The right pin is accepted.
    let fingerprint = host_key()
        .public_key()
        .fingerprint(HashAlg::Sha256)
        .to_string();
    let sandbox = builder(&f)
        .ssh_host_key(fingerprint)
        .build()
        .unwrap()
        .get(f.id)
        .await
        .unwrap();
    assert!(
        sandbox
            .run(&Command::new("true"))
            .await
            .unwrap()
            .status
            .success()
    );
}

#[tokio::test]
async fn background_commands_stay_on_toolbox_sessions() {
    let f = fixture("started", "sb-background_commands_").await;
    Mock::given(method("POST"))
        .and(path(format!("/toolbox/{}/process/session", f.id).as_str()))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&f.api)
        .await;
    Mock::given(method("POST"))
        .and(path(
            format!("/toolbox/{}/process/session/sdk-bg-1/exec", f.id).as_str(),
        ))
        .respond_with(ResponseTemplate::new(202).set_body_json(json!({"cmdId": "c1"})))
        .expect(1)
        .mount(&f.api)
        .await;
    let sandbox = builder(&f).build().unwrap().get(f.id).await.unwrap();
    let process = sandbox
        .exec(&Command::new("sleep").arg("9").background())
        .await
        .unwrap();
    assert_eq!(process.pid(), "sdk-bg-1/c1");
    assert!(f.gw.seen.lock().unwrap().commands.is_empty());
}

#[tokio::test]
async fn kill_process_reaches_a_command_over_ssh_by_its_pid() {
    let f = fixture("started", "sb-kill_process_reache").await;
    mint_answers(&f, GOOD, 1).await;
    let sandbox = builder(&f).build().unwrap().get(f.id).await.unwrap();
    let process = sandbox
        .exec(&Command::new("sleep").arg("30"))
        .await
        .unwrap();
    assert!(process.pid().starts_with("ssh/"), "{}", process.pid());
    sandbox.kill_process(process.pid()).await.unwrap();
    let status = process.wait().await.unwrap();
    assert!(!status.success());
    // A pid no live handle has is NotFound, and nothing is sent to the toolbox.
    let err = sandbox
        .kill_process("ssh/00000000000000000000000000000000")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
}
