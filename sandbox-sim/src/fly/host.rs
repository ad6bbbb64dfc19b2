//! The hosts the simulated machines run on: one real `local` sandbox per running machine (its
//! processes and files), driven on a runtime of their own with a real clock.
//!
//! The API side of the simulator keeps time on its server's runtime, so a test may pause that
//! clock; every call into a machine crosses to the hosts' runtime through `spawn_blocking`,
//! which keeps a paused clock from jumping ahead while a real process runs.
//!
//! Where the host allows mount namespaces (`unshare -m`, as root), each machine also gets a
//! `/tmp` of its own, empty on every boot: every command runs as
//! `unshare -m --propagation private sh -c 'mount --bind "$0" /tmp && exec "$@"' DIR ARGV…`,
//! and the machines' directories live under `/var/tmp`. Elsewhere the host's `/tmp` is shared
//! by every machine.

use crate::Backing;
use sandbox_sdk_core::local::LocalSandbox;
use sandbox_sdk_core::{Command, CreateSpec, ExitStatus, Output, ProcessControl, Sandbox};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// How an exec ended.
pub(crate) enum ExecEnd {
    /// The command finished.
    Done(Output),
    /// The deadline passed; the command was killed.
    TimedOut,
    /// The command could not be started (the machine is gone, ...).
    Failed(String),
}

/// The machines' real sandboxes and the runtime that drives them.
pub(crate) struct Host {
    runtime: Option<tokio::runtime::Runtime>,
    backing: Option<Backing>,
    sandboxes: Arc<Mutex<HashMap<String, LocalSandbox>>>,
    /// Each running machine's main process.
    mains: Arc<Mutex<HashMap<String, Arc<dyn ProcessControl>>>>,
    /// One lock per machine: its boots, halts and freezes happen one at a time.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Where each machine's own `/tmp` lives, when mount namespaces are available.
    tmp_root: Option<PathBuf>,
}

/// Whether machines get a `/tmp` of their own here.
#[cfg(test)]
pub(crate) fn isolates_tmp() -> bool {
    can_isolate_tmp()
}

/// Whether this host can give a command a private `/tmp` (checked once per process).
fn can_isolate_tmp() -> bool {
    static CAN: OnceLock<bool> = OnceLock::new();
    *CAN.get_or_init(|| probe_tmp_isolation(&std::env::temp_dir()))
}

/// Whether a command can get a private `/tmp` here, tried with a probe directory of its own
/// (a new one with a random name, never one that was there already) under `parent`.
fn probe_tmp_isolation(parent: &Path) -> bool {
    let Ok(dir) = tempfile::Builder::new()
        .prefix("fly-sim-probe-")
        .tempdir_in(parent)
    else {
        return false;
    };
    std::fs::write(dir.path().join("probe"), b"").is_ok()
        && std::process::Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c"])
            .arg("mount --bind \"$0\" /tmp && test -e /tmp/probe")
            .arg(dir.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

impl Host {
    /// A host under a fresh temporary directory.
    pub fn new() -> std::io::Result<Host> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("fly-sim-host")
            .enable_all()
            .build()?;
        // With a /tmp of their own, the machines' directories must not live under the host's
        // /tmp: a shell's logical `cd` goes through `$PWD`, which would lead into the mount.
        let isolate = can_isolate_tmp();
        let backing = if isolate {
            Backing::new_in(Path::new("/var/tmp"))?
        } else {
            Backing::new()?
        };
        let tmp_root = isolate.then(|| backing.root().join("machine-tmp"));
        Ok(Host {
            runtime: Some(runtime),
            backing: Some(backing),
            tmp_root,
            sandboxes: Arc::default(),
            mains: Arc::default(),
            locks: Mutex::default(),
        })
    }

    /// Runs `fut` on the hosts' runtime and waits for it without letting a paused clock of
    /// the caller's runtime jump ahead meanwhile.
    async fn run<F>(&self, fut: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let handle = self
            .runtime
            .as_ref()
            .map(|r| r.handle().clone())
            .expect("the host runtime lives as long as the host");
        match tokio::task::spawn_blocking(move || handle.block_on(fut)).await {
            Ok(output) => output,
            Err(e) => match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                // Cancelled: the runtime is shutting down and drops this task with it.
                Err(_) => std::future::pending().await,
            },
        }
    }

    /// The lock that orders the lifecycle steps of machine `id`.
    pub fn lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(id.to_owned()).or_default().clone()
    }

    /// Machine `id`'s own `/tmp`, when machines get one.
    fn tmp_of(&self, id: &str) -> Option<PathBuf> {
        self.tmp_root.as_ref().map(|root| root.join(id))
    }

    /// `argv` run with the machine's own `/tmp` mounted, when machines get one.
    fn in_machine(&self, id: &str, argv: Vec<String>) -> Vec<String> {
        let Some(tmp) = self.tmp_of(id) else {
            return argv;
        };
        let mut wrapped: Vec<String> = [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount --bind \"$0\" /tmp && exec \"$@\"",
        ]
        .map(String::from)
        .to_vec();
        wrapped.push(tmp.to_string_lossy().into_owned());
        wrapped.extend(argv);
        wrapped
    }

    fn sandbox(&self, id: &str) -> Option<LocalSandbox> {
        let sandboxes = self.sandboxes.lock().unwrap_or_else(|e| e.into_inner());
        sandboxes.get(id).cloned()
    }

    /// Boots machine `id`: a fresh sandbox with `env` (a machine's root filesystem starts from
    /// its image on every boot), or the frozen one thawed. `true` for a fresh boot.
    pub async fn boot(&self, id: &str, env: BTreeMap<String, String>) -> Result<bool, String> {
        if let Some(sandbox) = self.sandbox(id) {
            return self
                .run(async move { sandbox.resume().await })
                .await
                .map(|_| false)
                .map_err(|e| e.to_string());
        }
        if let Some(tmp) = self.tmp_of(id) {
            let _ = std::fs::remove_dir_all(&tmp);
            std::fs::create_dir_all(&tmp)
                .map_err(|e| format!("creating the machine's /tmp: {e}"))?;
        }
        let mut spec = CreateSpec::new();
        spec.env = env;
        let provider = self
            .backing
            .as_ref()
            .map(|b| b.provider().clone())
            .ok_or("the host is shutting down")?;
        let sandbox = self
            .run(async move { provider.create_local(&spec).await })
            .await
            .map_err(|e| e.to_string())?;
        let mut sandboxes = self.sandboxes.lock().unwrap_or_else(|e| e.into_inner());
        sandboxes.insert(id.to_owned(), sandbox);
        Ok(true)
    }

    /// Stops every process of machine `id` and forgets its files.
    pub async fn halt(&self, id: &str) {
        let sandbox = {
            let mut sandboxes = self.sandboxes.lock().unwrap_or_else(|e| e.into_inner());
            sandboxes.remove(id)
        };
        self.mains.lock().map(|mut m| m.remove(id)).ok();
        if let Some(sandbox) = sandbox {
            let _ = self.run(async move { sandbox.destroy().await }).await;
        }
        if let Some(tmp) = self.tmp_of(id) {
            let _ = std::fs::remove_dir_all(tmp);
        }
    }

    /// Freezes every process of machine `id` (memory kept).
    pub async fn freeze(&self, id: &str) {
        if let Some(sandbox) = self.sandbox(id) {
            let _ = self.run(async move { sandbox.pause().await }).await;
        }
    }

    /// Starts the machine's main process; `on_exit` gets its status when it ends (also when a
    /// halt kills it).
    pub async fn spawn_main(
        &self,
        id: &str,
        argv: Vec<String>,
        on_exit: impl FnOnce(ExitStatus) + Send + 'static,
    ) -> Result<(), String> {
        let sandbox = self.sandbox(id).ok_or("the machine has no host")?;
        let argv = self.in_machine(id, argv);
        let control = self
            .run(async move {
                let mut command = Command::new(argv[0].clone()).background();
                command.argv = argv;
                let process = sandbox.exec(&command).await.map_err(|e| e.to_string())?;
                let control = process.control();
                tokio::spawn(async move {
                    let status = process.wait().await.unwrap_or(ExitStatus::signal(9));
                    on_exit(status);
                });
                Ok::<_, String>(control)
            })
            .await?;
        let mut mains = self.mains.lock().unwrap_or_else(|e| e.into_inner());
        mains.insert(id.to_owned(), control);
        Ok(())
    }

    /// Kills machine `id`'s main process (the machine then stops, as its main process ended).
    pub async fn kill_main(&self, id: &str) {
        let control = self.mains.lock().ok().and_then(|m| m.get(id).cloned());
        if let Some(control) = control {
            let _ = self.run(async move { control.kill().await }).await;
        }
    }

    /// Runs `argv` in machine `id` with `stdin`, for at most `deadline` (real time).
    pub async fn exec(
        &self,
        id: &str,
        argv: Vec<String>,
        stdin: Option<String>,
        deadline: Duration,
    ) -> ExecEnd {
        let Some(sandbox) = self.sandbox(id) else {
            return ExecEnd::Failed("the machine is not running".into());
        };
        let argv = self.in_machine(id, argv);
        self.run(async move {
            let mut command = Command::new(argv[0].clone());
            command.argv = argv;
            if stdin.is_some() {
                command = command.stdin();
            }
            let mut process = match sandbox.exec(&command).await {
                Ok(p) => p,
                Err(e) if e.kind() == sandbox_sdk_core::ErrorKind::NotFound => {
                    // As a shell reports a program it cannot find.
                    return ExecEnd::Done(Output {
                        stdout: Default::default(),
                        stderr: format!("{}\n", e.message()).into(),
                        status: ExitStatus::code(127),
                    });
                }
                Err(e) => return ExecEnd::Failed(e.to_string()),
            };
            if let (Some(text), Some(mut writer)) = (stdin, process.take_stdin()) {
                // A command that exits without reading its stdin closes the pipe: not an error.
                let _ = writer.write_all(text.as_bytes()).await;
                let _ = writer.shutdown().await;
            }
            // Dropping the handle at the deadline kills the command's process group.
            match tokio::time::timeout(deadline, process.output()).await {
                Ok(Ok(output)) => ExecEnd::Done(output),
                Ok(Err(e)) => ExecEnd::Failed(e.to_string()),
                Err(_) => ExecEnd::TimedOut,
            }
        })
        .await
    }

    /// How many machines have a live host.
    pub fn running(&self) -> usize {
        self.sandboxes.lock().map(|s| s.len()).unwrap_or(0)
    }
}

impl Drop for Host {
    /// Stops every machine's processes and removes their files on a thread of its own, so a
    /// simulator dropped inside a runtime never blocks it.
    fn drop(&mut self) {
        let sandboxes: Vec<LocalSandbox> = self
            .sandboxes
            .lock()
            .map(|mut s| s.drain().map(|(_, sb)| sb).collect())
            .unwrap_or_default();
        let (runtime, backing) = (self.runtime.take(), self.backing.take());
        let cleanup = move || {
            if let Some(runtime) = &runtime {
                runtime.block_on(async {
                    for sandbox in sandboxes {
                        let _ = sandbox.destroy().await;
                    }
                });
            }
            drop(backing);
            drop(runtime);
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            let _ = std::thread::Builder::new()
                .name("fly-sim-cleanup".into())
                .spawn(cleanup);
        } else {
            cleanup();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tmp_probe_writes_only_into_a_directory_of_its_own() {
        let parent = tempfile::tempdir().unwrap();
        let victim = tempfile::tempdir().unwrap();
        // Another local user guessed the probe's name and pointed it at a directory of theirs.
        std::os::unix::fs::symlink(
            victim.path(),
            parent
                .path()
                .join(format!("fly-sim-probe-{}", std::process::id())),
        )
        .unwrap();
        probe_tmp_isolation(parent.path());
        assert!(
            std::fs::read_dir(victim.path()).unwrap().next().is_none(),
            "the probe wrote into another user's directory"
        );
        let left: Vec<_> = std::fs::read_dir(parent.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 1, "the probe leaves nothing behind: {left:?}");
    }
}
