//! The adapter against the Daytona simulator (`sandbox_sim::daytona`), for
//! behaviour only a live, stateful server shows.

use sandbox_daytona::{DaytonaBuilder, DaytonaProvider};
use sandbox_sdk_core::{Command, CreateSpec, Provider};
use sandbox_sim::daytona::DaytonaSim;
use std::time::Duration;

fn adapter(sim: &DaytonaSim) -> DaytonaBuilder {
    DaytonaProvider::builder()
        .api_key(sim.api_key())
        .api_url(sim.api_url())
        .poll_interval(Duration::from_millis(10))
}

/// Regression: a command whose session `kill_process` deleted before its log WebSocket opened
/// got the daemon's 404 on the upgrade and `wait()` failed with `NotFound`; it ends as killed,
/// as a 404 on the command's status already did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_killed_before_its_follow_opens_ends_as_killed() {
    let sim = DaytonaSim::builder()
        .transition(Duration::from_millis(10))
        .start()
        .await
        .unwrap();
    let provider = adapter(&sim)
        .direct_window(Duration::from_millis(50))
        .build()
        .unwrap();
    let sandbox = provider.create(&CreateSpec::new()).await.unwrap();
    let process = sandbox
        .exec(&Command::new("sleep").arg("30"))
        .await
        .unwrap();
    sandbox.kill_process(process.pid()).await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), process.wait())
        .await
        .expect("wait() returns")
        .expect("a killed command's wait() is its status, not an error");
    assert!(!status.success(), "{status}");
    assert_eq!(status.signal, Some(9));
    sandbox.destroy().await.unwrap();
}

/// Regression: stopping a sandbox ends every session of its daemon, but the adapter kept its
/// idle foreground sessions pooled, so the first command after a resume went to a session the
/// daemon no longer had and failed with `NotFound`; it now takes a new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_after_stop_and_resume_does_not_use_a_dead_pooled_session() {
    use sandbox_sdk_core::SandboxExt;
    let sim = DaytonaSim::builder()
        .transition(Duration::from_millis(10))
        .start()
        .await
        .unwrap();
    let provider = adapter(&sim).build().unwrap();
    let sandbox = provider.create(&CreateSpec::new()).await.unwrap();
    assert_eq!(
        sandbox.run_shell("echo one").await.unwrap().stdout_lossy(),
        "one\n"
    );
    sandbox.stop().await.unwrap();
    sandbox.resume().await.unwrap();
    let out = sandbox.run_shell("echo two").await.unwrap();
    assert_eq!(out.stdout_lossy(), "two\n");
    sandbox.destroy().await.unwrap();
}

/// A command that outlives the direct window is followed over the log WebSocket, partial lines
/// and both streams byte for byte, and ends on its end marks: the server here would keep the
/// stream open for an hour after the command ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_command_keeps_partial_lines_and_ends_before_the_linger() {
    use sandbox_sdk_core::SandboxExt;
    let sim = DaytonaSim::builder()
        .transition(Duration::from_millis(10))
        .follow_linger(Duration::from_secs(3600))
        .start()
        .await
        .unwrap();
    let provider = adapter(&sim)
        .direct_window(Duration::from_millis(100))
        .build()
        .unwrap();
    let sandbox = provider.create(&CreateSpec::new()).await.unwrap();
    let run = sandbox.run_shell("printf a; sleep 0.4; printf 'b\\nc'; printf e >&2; exit 5");
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the run ends on its end marks, not on the server's close")
        .unwrap();
    assert_eq!(
        (out.stdout_lossy(), out.stderr_lossy(), out.status.code),
        ("ab\nc".to_owned(), "e".to_owned(), Some(5))
    );
    sandbox.destroy().await.unwrap();
}

/// The steps of the official SDK's check (`tools/sim-check/daytona/check.mjs`) through the
/// adapter, so the two request logs can be compared (the normalised log is written to
/// `target/sim-check/daytona-adapter.jsonl`; the differences are listed in
/// `sandbox-conformance/README.md`, "Daytona simulator").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_sdk_check_steps_through_the_adapter() {
    use futures::StreamExt;
    use sandbox_sdk_core::{ErrorKind, ListFilter, ProcessEvent, ProviderExt, SandboxExt};
    use sandbox_sim::Simulator;

    let sim = DaytonaSim::start().await.unwrap();
    let provider = adapter(&sim).build().unwrap();

    let wrong = adapter(&sim).api_key("dtn_wrong").build().unwrap();
    let e = wrong.connect("anything").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthorized);

    let run = format!("r{}", std::process::id());
    let sandbox = provider
        .create(
            &CreateSpec::new()
                .metadata("suite", "sim-check")
                .metadata("run", &run)
                .env("GREETING", "hello from env"),
        )
        .await
        .unwrap();
    let out = sandbox.run_shell("echo \"$GREETING\"").await.unwrap();
    assert_eq!(out.stdout_lossy(), "hello from env\n");
    let out = sandbox.run_shell("echo before; exit 3").await.unwrap();
    assert_eq!(
        (out.status.code, out.stdout_lossy()),
        (Some(3), "before\n".into())
    );
    sandbox.mkdir("work/sub").await.unwrap();
    let out = sandbox
        .run(
            &Command::shell("basename \"$(pwd)\"; echo \"$FOO\"")
                .cwd("work/sub")
                .env("FOO", "bar"),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout_lossy(), "sub\nbar\n");
    let timed_out = sandbox
        .run(&Command::shell("sleep 10").timeout(Duration::from_secs(1)))
        .await;
    assert!(timed_out.map(|o| !o.status.success()).unwrap_or(true));
    let out = sandbox
        .run_shell("echo out; echo oops >&2; false")
        .await
        .unwrap();
    assert_eq!(
        (out.status.code, out.stdout_lossy(), out.stderr_lossy()),
        (Some(1), "out\n".into(), "oops\n".into())
    );
    let mut process = sandbox
        .exec(&Command::shell(
            "for i in 1 2 3; do echo \"line $i\"; sleep 0.2; done; echo warn >&2",
        ))
        .await
        .unwrap();
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    while let Some(event) = process.next().await {
        match event.unwrap() {
            ProcessEvent::Stdout(b) => stdout.extend_from_slice(&b),
            ProcessEvent::Stderr(b) => stderr.extend_from_slice(&b),
            ProcessEvent::Exit(status) => assert!(status.success()),
        }
    }
    assert_eq!(
        (stdout.as_slice(), stderr.as_slice()),
        (&b"line 1\nline 2\nline 3\n"[..], &b"warn\n"[..])
    );
    let background = sandbox
        .exec(&Command::new("sleep").arg("60").background())
        .await
        .unwrap();
    let listed = sandbox.processes().await.unwrap();
    assert!(listed.iter().any(|p| p.pid == background.pid()));
    sandbox.kill_process(background.pid()).await.unwrap();

    let data: Vec<u8> = (0..=255).collect();
    sandbox
        .write_file("files/data.bin", data.clone().into())
        .await
        .unwrap();
    assert_eq!(
        sandbox.read_file("files/data.bin").await.unwrap().as_ref(),
        data.as_slice()
    );
    let names: Vec<String> = sandbox
        .list_files("files", Default::default())
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert_eq!(names, ["data.bin"]);
    assert_eq!(sandbox.stat("files/data.bin").await.unwrap().size, 256);
    sandbox.mkdir("files/dir").await.unwrap();
    sandbox
        .rename("files/data.bin", "files/dir/moved.bin")
        .await
        .unwrap();
    assert_eq!(
        sandbox.stat("files/data.bin").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    sandbox.remove("files/dir").await.unwrap();
    assert_eq!(
        sandbox
            .read_file("files/dir/moved.bin")
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );

    sandbox
        .set_timeout(Duration::from_secs(30 * 60))
        .await
        .unwrap();
    let preview = sandbox.preview_link(8080).await.unwrap();
    assert!(preview.url.starts_with("http://8080-"));
    sandbox.ssh_access(Duration::from_secs(300)).await.unwrap();
    let listed = provider
        .list_all(&ListFilter::new().metadata("run", &run))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    sandbox.stop().await.unwrap();
    sandbox.resume().await.unwrap();
    assert_eq!(
        sandbox.run_shell("echo up").await.unwrap().stdout_lossy(),
        "up\n"
    );
    let id = sandbox.id().to_owned();
    sandbox.destroy().await.unwrap();
    assert_eq!(
        provider.connect(&id).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        provider
            .connect("no-such-sandbox")
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/sim-check");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("daytona-adapter.jsonl"),
        sim.server().log().to_json_lines(),
    )
    .unwrap();
}

/// The pipes this test process holds open (the simulator runs in it: each toolbox session is a
/// `bash` with pipes to its stdin, stdout and stderr).
fn open_pipes() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|fds| {
            fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
                .filter(|target| target.to_string_lossy().starts_with("pipe:"))
                .count()
        })
        .unwrap_or(0)
}

/// The sandbox's sessions and how many of their commands are still running.
async fn session_census(sandbox: &sandbox_daytona::DaytonaSandbox) -> (usize, usize) {
    let sessions = sandbox.sessions().await.unwrap();
    let running = sessions
        .iter()
        .flat_map(|s| &s.commands)
        .filter(|c| c.exit_code.is_none())
        .count();
    (sessions.len(), running)
}

/// Polls `done` every 20 ms until it holds, failing with `what` after 30 s.
async fn eventually<F: std::future::Future<Output = bool>>(
    what: &str,
    mut done: impl FnMut() -> F,
) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Regression (issue 12): a `run` or `exec` future dropped while in flight left its toolbox
/// session behind, often with its command still running in it (180–550 leftover pipes after
/// 2,000 dropped calls). Dropped calls now clean up in a detached task: a session whose command
/// was sent is deleted (killing the command), an unused one goes back to the pool (at most four
/// idle per sandbox), and once the pooled ones are deleted too the simulator holds exactly the
/// pipes it held before the first command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_calls_leave_no_session_or_process_behind() {
    use sandbox_daytona::DaytonaCreate;
    use sandbox_sdk_core::{Sandbox, SandboxExt};
    let sim = DaytonaSim::builder()
        .transition(Duration::from_millis(10))
        .start()
        .await
        .unwrap();
    let provider = adapter(&sim).build().unwrap();
    let sandbox = provider
        .create_sandbox(&DaytonaCreate::default())
        .await
        .unwrap();
    let pipes_before = open_pipes();
    assert_eq!(session_census(&sandbox).await, (0, 0));
    let sleep = Command::new("sleep").arg("30");

    // Dropped while the command runs in the synchronous request: each is dropped once the
    // simulator lists its command line (`sdk-cmd-N`, N counting this handle's commands).
    for n in 1..=20u64 {
        let run = sandbox.run(&sleep);
        tokio::pin!(run);
        let label = format!(": sdk-cmd-{n};");
        loop {
            tokio::select! {
                ended = &mut run => panic!("sleep 30 ended: {ended:?}"),
                _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
            let listed = sandbox.sessions().await.unwrap().into_iter().any(|s| {
                s.commands
                    .iter()
                    .any(|c| c.exit_code.is_none() && c.command.contains(&label))
            });
            if listed {
                break;
            }
        }
    }
    // Dropped after a few polls: before the session exists, while it is made, while the
    // command is sent, or after it ended.
    for i in 0..200usize {
        let command = if i % 2 == 0 {
            Command::shell("echo hi")
        } else {
            sleep.clone()
        };
        let mut run = Box::pin(sandbox.run(&command));
        for _ in 0..i % 7 {
            if futures::poll!(run.as_mut()).is_ready() {
                break;
            }
            tokio::task::yield_now().await;
        }
    }

    eventually(
        "dropped calls left commands running or sessions unpooled",
        || async {
            let (sessions, running) = session_census(&sandbox).await;
            running == 0 && sessions <= 4
        },
    )
    .await;
    // The handle still works, in a pooled session or a new one.
    let out = sandbox.run_shell("echo still here").await.unwrap();
    assert_eq!(out.stdout_lossy(), "still here\n");
    // The pooled sessions (a detached delete of a surplus one may still be finishing).
    for session in sandbox.sessions().await.unwrap() {
        match sandbox.delete_session(&session.id).await {
            Err(e) if e.kind() != sandbox_sdk_core::ErrorKind::NotFound => panic!("{e}"),
            _ => {}
        }
    }
    assert_eq!(session_census(&sandbox).await, (0, 0));
    eventually("the simulator's session shells kept pipes open", || async {
        open_pipes() <= pipes_before
    })
    .await;
    sandbox.destroy().await.unwrap();
}

/// Issue 23, against real session shells: a program the command runs forges end marks on both
/// streams, with every 32-hex-digit string it finds in its ancestors' argv and environment (where
/// a key written into the line would be) and with the fixed mark of before, then the command
/// goes on for a second and exits 3. The live follower ends at the command's real end, with its
/// status, and passes the forged lines on as output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_end_marks_do_not_end_a_live_follow() {
    use sandbox_sdk_core::SandboxExt;
    let sim = DaytonaSim::builder()
        .transition(Duration::from_millis(10))
        .start()
        .await
        .unwrap();
    let provider = adapter(&sim).direct_window(Duration::ZERO).build().unwrap();
    let sandbox = provider.create(&CreateSpec::new()).await.unwrap();
    let forger = r#"p=$$
while [ "${p:-0}" -gt 1 ]; do
  tr '\0' '\n' < /proc/$p/cmdline 2>/dev/null; tr '\0' '\n' < /proc/$p/environ 2>/dev/null
  p=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$p/status 2>/dev/null)
done | grep -o '[0-9a-f]\{32\}' | sort -u | while read -r k; do
  printf '__sandbox_mark_%s:0\n' "$k"; printf '__sandbox_mark_%s:\n' "$k" >&2
done
printf '__sandbox_sdk_end_of_output__:0\n'; printf '__sandbox_sdk_end_of_output__\n' >&2"#;
    let line = format!(
        "sh -c {}; sleep 1; echo after; exit 3",
        sandbox_sdk_core::shell::shell_quote(forger).unwrap()
    );
    let out = tokio::time::timeout(Duration::from_secs(60), sandbox.run(&Command::shell(line)))
        .await
        .expect("the command ends")
        .unwrap();
    assert_eq!(out.status.code, Some(3), "ended on a forged mark");
    let stdout = out.stdout_lossy();
    assert!(
        stdout.ends_with("__sandbox_sdk_end_of_output__:0\nafter\n"),
        "{stdout:?}"
    );
    assert!(!stdout.contains("__sandbox_key_"), "{stdout:?}");
    assert!(
        out.stderr_lossy()
            .ends_with("__sandbox_sdk_end_of_output__\n"),
        "{:?}",
        out.stderr_lossy()
    );
    sandbox.destroy().await.unwrap();
}
