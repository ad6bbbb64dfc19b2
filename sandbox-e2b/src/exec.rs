//! Processes over envd's `process.Process` service (PROTOCOL.md §5): a command started as a
//! `Start` server stream and read into process events, reattached with `Connect`, fed stdin with
//! `SendInput`/`CloseStdin`, signalled with `SendSignal`, resized with `Update`, listed with
//! `List`.

use crate::api::connect::ConnectStream;
use crate::api::envd::Envd;
use crate::config::PROVIDER;
use crate::error::bad_response;
use crate::wire::{
    self, EndEvent, EventEnvelope, ProcessConfig, ProcessInput, Pty, PtySizeWire, Selector,
    StartRequest,
};
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use sandbox_sdk_core::{
    Command, Error, ErrorKind, EventStream, ExitStatus, Process, ProcessControl, ProcessEvent,
    ProcessInfo, PtySize, Result, Stdin,
};
use std::sync::Arc;
use std::time::Duration;

/// Go's signal names, as in `ProcessState.String()` (`signal: killed`).
fn signal_number(name: &str) -> Option<i32> {
    Some(match name {
        "hangup" => 1,
        "interrupt" => 2,
        "quit" => 3,
        "illegal instruction" => 4,
        "trace/breakpoint trap" => 5,
        "aborted" => 6,
        "bus error" => 7,
        "floating point exception" => 8,
        "killed" => 9,
        "user defined signal 1" => 10,
        "segmentation fault" => 11,
        "user defined signal 2" => 12,
        "broken pipe" => 13,
        "alarm clock" => 14,
        "terminated" => 15,
        _ => return None,
    })
}

/// How an `end` event maps to an exit status. An absent `exitCode` is 0; death by a signal is
/// reported as `signal: <name>` with `exited` false.
pub(crate) fn exit_status(end: &EndEvent) -> ExitStatus {
    if !end.exited
        && let Some(name) = end.status.strip_prefix("signal: ")
    {
        let name = name.trim_end_matches(" (core dumped)");
        if let Some(sig) = signal_number(name) {
            return ExitStatus::signal(sig);
        }
    }
    ExitStatus::code(end.exit_code)
}

/// What a decoded message means for the reader.
enum Step {
    Event(ProcessEvent),
    End(ExitStatus),
    Skip,
}

fn step(envelope: EventEnvelope) -> Step {
    let Some(event) = envelope.event else {
        return Step::Skip;
    };
    if let Some(data) = event.data {
        if let Some(bytes) = data.stdout {
            return Step::Event(ProcessEvent::Stdout(Bytes::from(bytes)));
        }
        if let Some(bytes) = data.stderr {
            return Step::Event(ProcessEvent::Stderr(Bytes::from(bytes)));
        }
        if let Some(bytes) = data.pty {
            // A pty merges both streams into one terminal.
            return Step::Event(ProcessEvent::Stdout(Bytes::from(bytes)));
        }
        return Step::Skip;
    }
    if let Some(end) = event.end {
        return Step::End(exit_status(&end));
    }
    Step::Skip
}

/// Reads `start{pid}` from a fresh Start/Connect stream. Errors sent before the first event
/// (missing cwd, unknown user, unknown pid) come back here.
async fn read_start(stream: &mut ConnectStream, operation: &str, sandbox_id: &str) -> Result<u32> {
    loop {
        match stream.next_json::<EventEnvelope>().await {
            None => {
                return Err(bad_response(
                    operation,
                    Some(sandbox_id),
                    "the stream ended before the process started",
                ));
            }
            Some(Err(e)) => return Err(e),
            Some(Ok(envelope)) => {
                if let Some(start) = envelope.event.and_then(|e| e.start) {
                    return Ok(start.pid);
                }
            }
        }
    }
}

/// How long past a command's [`Command::timeout`] the client waits for envd to end the stream
/// before giving up on its own. envd kills the process at the deadline and ends the stream with
/// `deadline_exceeded` at once (PROTOCOL.md §5.3); its answer wins whenever it arrives within
/// this grace. The client's clock starts when `start` arrives, after envd's, so the grace only
/// covers jitter, not a round trip.
pub const TIMEOUT_GRACE: Duration = Duration::from_millis(500);

/// The client-side end of a command with a timeout: when the stream has not ended by then.
#[derive(Clone, Copy)]
struct Deadline {
    at: tokio::time::Instant,
    timeout: Duration,
}

impl Deadline {
    fn error(&self, sandbox_id: &str) -> Error {
        Error::new(
            ErrorKind::Timeout,
            format!(
                "the process did not end within its timeout of {}ms (and {}ms of grace): envd sent no end",
                self.timeout.as_millis(),
                TIMEOUT_GRACE.as_millis()
            ),
        )
        .with_provider(PROVIDER)
        .with_operation("exec")
        .with_sandbox_id(sandbox_id)
        // Like envd's own deadline_exceeded: running it again meets the same deadline.
        .with_retryable(false)
    }
}

/// The next decoded message, or the deadline's error once it passes.
async fn next_event(
    stream: &mut ConnectStream,
    deadline: Option<Deadline>,
    sandbox_id: &str,
) -> Option<Result<EventEnvelope>> {
    match deadline {
        None => stream.next_json::<EventEnvelope>().await,
        Some(d) => match tokio::time::timeout_at(d.at, stream.next_json::<EventEnvelope>()).await {
            Ok(next) => next,
            Err(_) => Some(Err(d.error(sandbox_id))),
        },
    }
}

/// Reads `data`, cut into pieces of `chunk` bytes, as the Connect body of a process's output
/// stream, the way `exec` reads one (envelopes, each message as a process event, the
/// end-of-stream checked): the fuzz target `e2b_process_stream` and its proptest drive it.
pub(crate) async fn read_process_stream(data: &[u8], chunk: usize) -> Vec<Result<ProcessEvent>> {
    let pieces: Vec<sandbox_sdk_core::Result<Bytes>> = data
        .chunks(chunk.max(1))
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let body = futures::stream::iter(pieces).boxed();
    events(
        ConnectStream::new(body, "exec", "fuzz"),
        None,
        None,
        "fuzz".into(),
    )
    .collect()
    .await
}

/// Turns the rest of the stream into process events, lazily: nothing runs unless the handle is
/// polled, and dropping the handle drops the connection (no task is left behind). With a
/// `deadline`, a stream still open past it ends with a `Timeout` error.
fn events(
    stream: ConnectStream,
    pump: Option<Pump>,
    deadline: Option<Deadline>,
    sandbox_id: String,
) -> EventStream {
    futures::stream::unfold(Some((stream, pump)), move |state| {
        let sandbox_id = sandbox_id.clone();
        async move {
            let (mut stream, mut pump) = state?;
            loop {
                match next_event(&mut stream, deadline, &sandbox_id).await {
                    None => {
                        if let Some(p) = pump.take() {
                            p.finish().await;
                        }
                        return None;
                    }
                    Some(Err(e)) => {
                        if let Some(p) = pump.take() {
                            p.finish().await;
                        }
                        return Some((Err(e), None));
                    }
                    Some(Ok(envelope)) => match step(envelope) {
                        Step::Skip => {}
                        Step::Event(event) => return Some((Ok(event), Some((stream, pump)))),
                        Step::End(status) => {
                            if let Some(p) = pump.take() {
                                p.finish().await;
                            }
                            // The end-stream envelope follows at once; an error there (a
                            // deadline reached) wins over the exit status.
                            return match stream.next_message().await {
                                Some(Err(e)) => Some((Err(e), None)),
                                _ => Some((Ok(ProcessEvent::Exit(status)), None)),
                            };
                        }
                    },
                }
            }
        }
    })
    .boxed()
}

/// Kill (SendSignal) and resize (Update) of one process, independent of its output stream.
struct Control {
    envd: Envd,
    pid: u32,
}

#[async_trait]
impl ProcessControl for Control {
    async fn kill(&self) -> Result<()> {
        self.envd
            .send_signal(Selector::Pid(self.pid), "SIGNAL_SIGKILL")
            .await
    }

    async fn resize(&self, size: PtySize) -> Result<()> {
        self.envd
            .resize_pty(
                self.pid,
                PtySizeWire {
                    cols: size.cols.into(),
                    rows: size.rows.into(),
                },
            )
            .await
    }
}

/// Kills a process by pid or tag (`SendSignal` with `SIGNAL_SIGKILL`).
pub(crate) async fn kill(envd: &Envd, pid_or_tag: &str) -> Result<()> {
    signal(envd, pid_or_tag, false).await
}

/// Sends SIGTERM (`graceful`) or SIGKILL to a process by pid or tag.
pub(crate) async fn signal(envd: &Envd, pid_or_tag: &str, graceful: bool) -> Result<()> {
    let signal = if graceful {
        "SIGNAL_SIGTERM"
    } else {
        "SIGNAL_SIGKILL"
    };
    envd.send_signal(Selector::parse(pid_or_tag), signal).await
}

/// The processes running in the sandbox (`List`).
pub(crate) async fn processes(envd: &Envd) -> Result<Vec<ProcessInfo>> {
    let list = envd.list_processes().await?;
    Ok(list
        .processes
        .into_iter()
        .map(|p| {
            let mut argv = vec![p.config.cmd];
            argv.extend(p.config.args);
            ProcessInfo {
                pid: p.pid.to_string(),
                tag: p.tag,
                argv,
                cwd: p.config.cwd,
                running: true,
            }
        })
        .collect())
}

/// The task sending a process's stdin, and how to tell it the process has ended.
struct Pump {
    exited: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Pump {
    /// Tells the pump the process ended and waits until it has sent what was already written
    /// (and `CloseStdin` when the writer was closed). It never waits for more input.
    async fn finish(self) {
        let _ = self.exited.send(());
        let _ = self.task.await;
    }
}

/// Sends `bytes` to the stdin, or the pty, of process `pid`.
async fn send_input(envd: &Envd, pid: u32, pty: bool, bytes: &[u8]) -> Result<()> {
    let data = wire::b64(bytes);
    let input = if pty {
        ProcessInput::Pty(data)
    } else {
        ProcessInput::Stdin(data)
    };
    envd.send_input(pid, input).await
}

/// Closes stdin: `CloseStdin`, or `0x04` (end of transmission) on a pty (PROTOCOL.md §5.1).
async fn close_input(envd: &Envd, pid: u32, pty: bool) -> Result<()> {
    if pty {
        return send_input(envd, pid, pty, &[0x04]).await;
    }
    envd.close_stdin(pid).await
}

/// Sends stdin chunks as `SendInput` calls in order, then closes stdin when the writer is shut
/// down or dropped. When the process ends (or its handle is dropped) the pump sends what is
/// already queued and stops, so no task outlives the process. How it ended goes back to the
/// writer: its shutdown returns once the close was answered, with the call's error (a 401 stays
/// `Unauthorized`, a 429 `QuotaExceeded`) when a call failed.
fn stdin_pump(envd: Envd, pid: u32, pty: bool) -> (Stdin, Pump) {
    use tokio::sync::mpsc::error::TryRecvError;
    let (stdin, mut rx, outcome) = Stdin::channel_with_outcome(16);
    let (exited, mut exited_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let result: Result<()> = async {
            loop {
                tokio::select! {
                    biased;
                    chunk = rx.recv() => match chunk {
                        Some(chunk) => send_input(&envd, pid, pty, &chunk).await?,
                        None => return close_input(&envd, pid, pty).await,
                    },
                    _ = &mut exited_rx => loop {
                        match rx.try_recv() {
                            Ok(chunk) => send_input(&envd, pid, pty, &chunk).await?,
                            Err(TryRecvError::Empty) => return Ok(()),
                            Err(TryRecvError::Disconnected) => {
                                return close_input(&envd, pid, pty).await;
                            }
                        }
                    },
                }
            }
        }
        .await;
        if let Err(e) = &result {
            tracing::debug!(error = %e, "stdin of process {pid} closed after an error");
        }
        // The writer's shutdown (or next write) answers with this, kind and all.
        outcome.report(result);
        drop(rx);
    });
    (stdin, Pump { exited, task })
}

/// The shell both official E2B SDKs run a command line with: `commands.run(cmd)` sends
/// `/bin/bash -l -c cmd` (PROTOCOL.md §5.3, §9 Example A), a login bash that reads the image's
/// profile. `sh` on E2B's images is dash, without that profile.
pub const SHELL: [&str; 3] = ["/bin/bash", "-l", "-c"];

/// The program and arguments envd is asked to run. A [`Command::shell`] line
/// ([`Command::shell_line`]) runs as `/bin/bash -l -c LINE`, as the official SDKs run it; any
/// other argv, an explicit `sh -c` included, is sent as given (`cmd` = argv\[0\]).
fn program_and_args(command: &Command) -> (String, Vec<String>) {
    if let Some(line) = command.shell_line() {
        return (
            SHELL[0].to_owned(),
            vec![SHELL[1].to_owned(), SHELL[2].to_owned(), line.to_owned()],
        );
    }
    match command.argv.as_slice() {
        [program, args @ ..] => (program.clone(), args.to_vec()),
        [] => Default::default(),
    }
}

/// The `StartRequest` for a command: the program and arguments (a [`Command::shell`] line
/// through [`SHELL`]), env, cwd, tag, pty, and stdin always explicit (envd treats an absent
/// `stdin` as true).
pub(crate) fn start_request(command: &Command) -> StartRequest {
    let (cmd, args) = program_and_args(command);
    StartRequest {
        process: ProcessConfig {
            cmd,
            args,
            envs: command.env.clone(),
            cwd: command.cwd.clone(),
        },
        pty: command.pty.map(|size| Pty {
            size: PtySizeWire {
                cols: size.cols.into(),
                rows: size.rows.into(),
            },
        }),
        tag: command.tag.clone(),
        stdin: command.stdin,
    }
}

/// Starts a command: a `Start` server stream whose first event gives the pid.
pub(crate) async fn start(envd: &Envd, command: &Command) -> Result<Process> {
    command.validate()?;
    let request = start_request(command);
    // The process timeout is the Start deadline; zero means no limit, and no header is sent.
    let deadline = (!command.timeout.is_zero()).then_some(command.timeout);
    let open = async {
        let mut stream = envd
            .start(&request, command.user.as_deref(), deadline)
            .await?;
        let pid = read_start(&mut stream, "exec", &envd.sandbox_id).await?;
        Ok::<_, Error>((stream, pid))
    };
    let (stream, pid) = envd
        .establish(
            command.request_timeout,
            "exec",
            "the process did not start",
            open,
        )
        .await?;
    let deadline = deadline.map(|timeout| Deadline {
        at: tokio::time::Instant::now() + timeout.saturating_add(TIMEOUT_GRACE),
        timeout,
    });
    let pty = command.pty.is_some();
    let (stdin, pump) = match command.stdin {
        true => {
            let (stdin, pump) = stdin_pump(envd.clone(), pid, pty);
            (Some(stdin), Some(pump))
        }
        false => (None, None),
    };
    let control = Arc::new(Control {
        envd: envd.clone(),
        pid,
    });
    Ok(Process::new(
        pid.to_string(),
        events(stream, pump, deadline, envd.sandbox_id.clone()),
        stdin,
        control,
    ))
}

/// Reattaches by pid or tag: a `Connect` server stream (output from now on, then the exit),
/// whose response head and `start` event must come within the request timeout.
pub(crate) async fn attach(envd: &Envd, pid_or_tag: &str) -> Result<Process> {
    let open = async {
        let mut stream = envd.connect_process(Selector::parse(pid_or_tag)).await?;
        let pid = read_start(&mut stream, "attach", &envd.sandbox_id).await?;
        Ok::<_, Error>((stream, pid))
    };
    let (stream, pid) = envd
        .establish(None, "attach", "the process stream did not open", open)
        .await?;
    let control = Arc::new(Control {
        envd: envd.clone(),
        pid,
    });
    Ok(Process::new(
        pid.to_string(),
        events(stream, None, None, envd.sandbox_id.clone()),
        None,
        control,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(json: &str) -> ExitStatus {
        let e: EndEvent = serde_json::from_str(json).unwrap();
        exit_status(&e)
    }

    #[test]
    fn exit_statuses_from_go() {
        assert_eq!(
            end(r#"{"exited":true,"status":"exit status 0"}"#),
            ExitStatus::code(0)
        );
        assert_eq!(
            end(r#"{"exitCode":3,"exited":true,"status":"exit status 3","error":"exit status 3"}"#),
            ExitStatus::code(3)
        );
        assert_eq!(
            end(r#"{"exitCode":-1,"status":"signal: killed","error":"signal: killed"}"#),
            ExitStatus::signal(9)
        );
        assert_eq!(
            end(r#"{"exitCode":-1,"status":"signal: terminated"}"#),
            ExitStatus::signal(15)
        );
        assert_eq!(
            end(r#"{"exitCode":-1,"status":"signal: weird"}"#),
            ExitStatus::code(-1)
        );
    }

    mod streams {
        use super::super::events;
        use crate::api::connect::{ConnectStream, FLAG_END_STREAM, encode_envelope};
        use bytes::Bytes;
        use futures::StreamExt;
        use proptest::prelude::*;
        use sandbox_sdk_core::{ExitStatus, ProcessEvent};

        fn body(chunks: &[(bool, Vec<u8>)], exit: i32, spaced: bool) -> Vec<u8> {
            let sep = if spaced { ", " } else { "," };
            let mut out = encode_envelope(br#"{"event":{"start":{"pid":1}}}"#).to_vec();
            for (stderr, data) in chunks {
                let key = if *stderr { "stderr" } else { "stdout" };
                let json = format!(
                    r#"{{"event":{{"data":{{"{key}":"{}"}}}}}}"#,
                    crate::wire::b64(data)
                );
                out.extend_from_slice(&encode_envelope(json.as_bytes()));
            }
            let end = if exit == 0 {
                format!(r#"{{"event":{{"end":{{"exited":true{sep}"status":"exit status 0"}}}}}}"#)
            } else {
                format!(
                    r#"{{"event":{{"end":{{"exitCode":{exit}{sep}"exited":true{sep}"status":"exit status {exit}"}}}}}}"#
                )
            };
            out.extend_from_slice(&encode_envelope(end.as_bytes()));
            out.extend_from_slice(&[FLAG_END_STREAM, 0, 0, 0, 2, b'{', b'}']);
            out
        }

        type Collected = (Vec<u8>, Vec<u8>, Option<ExitStatus>, bool);

        fn collect(body: Vec<u8>, cuts: &[usize]) -> Collected {
            let mut pieces = Vec::new();
            let mut last = 0;
            for &c in cuts {
                pieces.push(Ok(Bytes::copy_from_slice(&body[last..c])));
                last = c;
            }
            pieces.push(Ok(Bytes::copy_from_slice(&body[last..])));
            let stream = ConnectStream::new(futures::stream::iter(pieces).boxed(), "exec", "isb");
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let mut events = events(stream, None, None, "isb".into());
                let (mut out, mut err, mut exit, mut failed) =
                    (Vec::new(), Vec::new(), None, false);
                while let Some(event) = events.next().await {
                    match event {
                        Ok(ProcessEvent::Stdout(b)) => out.extend_from_slice(&b),
                        Ok(ProcessEvent::Stderr(b)) => err.extend_from_slice(&b),
                        Ok(ProcessEvent::Exit(s)) => exit = Some(s),
                        Err(_) => failed = true,
                    }
                }
                (out, err, exit, failed)
            })
        }

        proptest! {
            /// Any output (so any UTF-8 split), any chunking of the body, compact or spaced
            /// JSON: stdout and stderr come out byte for byte, apart, with the exit code.
            #[test]
            fn output_survives_any_chunking(
                chunks in proptest::collection::vec((any::<bool>(), proptest::collection::vec(any::<u8>(), 1..40)), 0..6),
                exit in -1i32..4,
                spaced in any::<bool>(),
                cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..10),
            ) {
                let body = body(&chunks, exit, spaced);
                let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(body.len() + 1)).collect();
                cuts.sort_unstable();
                let (out, err, status, failed) = collect(body, &cuts);
                let want_out: Vec<u8> = chunks.iter().filter(|c| !c.0).flat_map(|c| c.1.clone()).collect();
                let want_err: Vec<u8> = chunks.iter().filter(|c| c.0).flat_map(|c| c.1.clone()).collect();
                prop_assert!(!failed);
                prop_assert_eq!(out, want_out);
                prop_assert_eq!(err, want_err);
                prop_assert_eq!(status, Some(ExitStatus::code(exit)));
            }

            /// Garbage after a valid start: never a panic, and whenever the bytes are not a
            /// well-framed envelope stream the reader reports an error (no silent success).
            #[test]
            fn garbage_is_an_error_not_a_panic(
                garbage in proptest::collection::vec(any::<u8>(), 0..200),
                cut in any::<prop::sample::Index>(),
            ) {
                let mut body = encode_envelope(br#"{"event":{"start":{"pid":1}}}"#).to_vec();
                body.extend_from_slice(&garbage);
                let at = cut.index(body.len() + 1);
                let (_, _, _, failed) = collect(body, &[at]);
                let mut decoder = crate::api::connect::FrameDecoder::new();
                decoder.push(&garbage);
                let mut well_framed = true;
                loop {
                    match decoder.next_frame() {
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        Err(_) => { well_framed = false; break; }
                    }
                }
                well_framed = well_framed && decoder.finish().is_ok();
                if !well_framed {
                    prop_assert!(failed, "a malformed stream must end in an error");
                }
            }
        }

        #[test]
        fn every_single_cut_of_example_b_gives_the_same_output() {
            let body = body(
                &[
                    (true, b"oops\n".to_vec()),
                    (false, "é→".as_bytes().to_vec()),
                ],
                3,
                true,
            );
            let whole = collect(body.clone(), &[]);
            assert_eq!(whole.1, b"oops\n");
            assert_eq!(whole.2, Some(ExitStatus::code(3)));
            for i in 0..=body.len() {
                assert_eq!(collect(body.clone(), &[i]), whole, "cut at {i}");
            }
        }
    }

    /// The request body of PROTOCOL.md §9 Example A, byte for byte (79 bytes, enveloped).
    #[test]
    fn start_request_envelope_matches_example_a() {
        let hex = "000000004a7b2270726f63657373223a7b22636d64223a222f62696e2f62617368222c2261726773223a5b222d6c222c222d63222c226563686f206869225d7d2c22737464696e223a66616c73657d";
        let want: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let cmd = Command::new("/bin/bash").args(["-l", "-c", "echo hi"]);
        let json = serde_json::to_vec(&start_request(&cmd)).unwrap();
        let got = crate::api::connect::encode_envelope(&json);
        assert_eq!(got.len(), 79);
        assert_eq!(&got[..], &want[..]);
    }

    #[test]
    fn shell_lines_run_in_a_login_bash_like_the_official_sdks() {
        // Command::shell("echo hi") is Example A's request, byte for byte.
        let shell = start_request(&Command::shell("echo hi"));
        let sdk = start_request(&Command::new("/bin/bash").args(["-l", "-c", "echo hi"]));
        assert_eq!(shell, sdk);
        // Anything that is not a Command::shell line is sent as given, an explicit `sh -c` too.
        for argv in [
            vec!["sh"],
            vec!["sh", "-c"],
            vec!["sh", "-c", "x"],
            vec!["sh", "-c", "a", "b"],
            vec!["sh", "-e", "x"],
            vec!["/bin/sh", "-c", "x"],
        ] {
            let request = start_request(&Command::new(argv[0]).args(argv[1..].iter().copied()));
            assert_eq!(request.process.cmd, argv[0]);
            assert_eq!(request.process.args, argv[1..]);
        }
    }

    #[test]
    fn start_request_keeps_argv_and_options() {
        let cmd = Command::new("python3")
            .arg("-c")
            .arg("print(1)")
            .cwd("/tmp")
            .env("A", "1")
            .tag("job")
            .pty(PtySize {
                cols: 100,
                rows: 30,
            });
        let json = serde_json::to_string(&start_request(&cmd)).unwrap();
        assert_eq!(
            json,
            r#"{"process":{"cmd":"python3","args":["-c","print(1)"],"envs":{"A":"1"},"cwd":"/tmp"},"pty":{"size":{"cols":100,"rows":30}},"tag":"job","stdin":false}"#
        );
    }
}
