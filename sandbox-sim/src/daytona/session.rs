//! Toolbox sessions: a real `bash` reading commands from its stdin, each command run in the
//! daemon's wrapper, which labels every output line with its stream's marker into the command's
//! log file and writes the exit code once both streams are drained (PROTOCOL.md §3.2, §4.1).

use sandbox_sdk_core::local::LocalSandbox;
use sandbox_sdk_core::{Command as LocalCommand, Sandbox};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

/// One command of a session.
pub(crate) struct SessionCommand {
    /// Its id (a UUID).
    pub id: String,
    /// The command line as sent.
    pub command: String,
    dir: PathBuf,
}

impl SessionCommand {
    /// The log file: every line behind its stream's marker.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("output.log")
    }

    /// The exit code, once the wrapper wrote it.
    pub fn exit_code(&self) -> Option<i32> {
        let text = std::fs::read_to_string(self.dir.join("exit_code")).ok()?;
        text.trim().parse().ok()
    }

    /// The log so far.
    pub fn log(&self) -> Vec<u8> {
        std::fs::read(self.log_path()).unwrap_or_default()
    }
}

/// A session: its shell, its commands, and whether it has ended (deleted, its sandbox stopped,
/// or its shell exited).
pub(crate) struct Session {
    /// The session id the client chose.
    pub id: String,
    dir: PathBuf,
    pid: String,
    stdin: tokio::sync::Mutex<Option<sandbox_sdk_core::Stdin>>,
    commands: Mutex<Vec<Arc<SessionCommand>>>,
    ended: watch::Sender<bool>,
}

impl Session {
    /// Starts the session's shell in `sandbox`'s working directory, keeping its command logs
    /// under `dir`.
    pub async fn start(
        sandbox: &LocalSandbox,
        id: &str,
        dir: PathBuf,
    ) -> sandbox_sdk_core::Result<Arc<Session>> {
        std::fs::create_dir_all(&dir).map_err(|e| {
            sandbox_sdk_core::Error::new(
                sandbox_sdk_core::ErrorKind::Provider,
                format!("cannot create the session directory: {e}"),
            )
        })?;
        let mut shell = sandbox
            .exec(&LocalCommand::new("bash").background().stdin())
            .await?;
        let (ended, _) = watch::channel(false);
        let session = Arc::new(Session {
            id: id.to_owned(),
            dir,
            pid: shell.pid().to_owned(),
            stdin: tokio::sync::Mutex::new(shell.take_stdin()),
            commands: Mutex::new(Vec::new()),
            ended,
        });
        let watcher = session.clone();
        tokio::spawn(async move {
            let _ = shell.wait().await;
            watcher.ended.send_replace(true);
        });
        Ok(session)
    }

    /// Whether the session has ended.
    pub fn has_ended(&self) -> bool {
        *self.ended.borrow()
    }

    /// Waits until the session ends.
    pub async fn ended(&self) {
        let mut rx = self.ended.subscribe();
        let _ = rx.wait_for(|ended| *ended).await;
    }

    /// Ends the session and returns its shell's pid, for the caller to kill its process group.
    pub fn end(&self) -> String {
        self.ended.send_replace(true);
        self.pid.clone()
    }

    /// Its commands, oldest first.
    pub fn commands(&self) -> Vec<Arc<SessionCommand>> {
        self.commands
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The command with this id.
    pub fn command(&self, id: &str) -> Option<Arc<SessionCommand>> {
        self.commands().into_iter().find(|c| c.id == id)
    }

    /// Sends `command` to the shell in the daemon's wrapper.
    pub async fn run(&self, command: &str) -> std::io::Result<Arc<SessionCommand>> {
        let id = super::random_uuid();
        let dir = self.dir.join(&id);
        std::fs::create_dir_all(&dir)?;
        // The daemon creates the log before it hands the command to the shell.
        std::fs::File::create(dir.join("output.log"))?;
        let cmd = Arc::new(SessionCommand {
            id,
            command: command.to_owned(),
            dir,
        });
        self.commands
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(cmd.clone());
        self.write(wrapper(&cmd.dir, command).as_bytes()).await?;
        Ok(cmd)
    }

    /// Writes `data` to the shell's stdin, where a running command reads its input.
    pub async fn write(&self, data: &[u8]) -> std::io::Result<()> {
        let mut stdin = self.stdin.lock().await;
        let Some(stdin) = stdin.as_mut() else {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        };
        stdin.write_all(data).await?;
        stdin.flush().await
    }
}

/// The wrapper the daemon runs a session command in: two labellers read the command's stdout
/// and stderr from FIFOs line by line and append each line behind its marker to the log; the
/// exit code is written when both have drained. The command runs in the session's shell
/// itself (`{ …; }`), so `cd` and `export` persist, and `exit` ends the session.
fn wrapper(dir: &std::path::Path, command: &str) -> String {
    let dir = shell_quote(&dir.to_string_lossy());
    let label = |marker: &str, pipe: &str| {
        format!(
            "( while IFS= read -r __l || [ -n \"$__l\" ]; do printf '{marker}%s\\n' \"$__l\"; done < \"{pipe}\" ) >> \"$__d/output.log\" &"
        )
    };
    format!(
        "{{ __d={dir}; __sp=\"$__d/stdout.pipe\"; __ep=\"$__d/stderr.pipe\"; rm -f \"$__sp\" \"$__ep\"; \
         mkfifo \"$__sp\" \"$__ep\" || exit 1; \
         {} __r1=$!; {} __r2=$!; \
         {{ {command}\n}} > \"$__sp\" 2> \"$__ep\"; __ec=$?; wait \"$__r1\" \"$__r2\"; \
         rm -f \"$__sp\" \"$__ep\"; echo \"$__ec\" > \"$__d/exit_code.tmp\" && mv \"$__d/exit_code.tmp\" \"$__d/exit_code\"; }}\n",
        label("\\001\\001\\001", "$__sp"),
        label("\\002\\002\\002", "$__ep"),
    )
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}
