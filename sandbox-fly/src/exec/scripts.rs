//! The POSIX `sh` scripts the adapter runs through `/exec` for background processes with polled
//! output (the file scripts are the core's, [`sandbox_sdk_core::emulate::files`]). Every path and value reaches a script
//! as a positional argument (`sh -c SCRIPT sh ARG…`), never spliced into its text, so no input
//! needs shell quoting. They use only POSIX tools plus `base64`, `head -c`, `tail -c`, `stat -c`
//! and `find -mindepth/-maxdepth`, which both GNU coreutils and BusyBox provide (the tests run
//! them under the host's `sh`, bash and BusyBox). What they print about names from the machine
//! (file listings, process ids) cannot be forged by a name holding a newline: listings travel as
//! NUL-terminated records in base64, process ids are listed only when well-formed.
//!
//! Every process and file the launch makes in the machine is on the path of a short `run`, so it
//! makes few: no directory (a process's files sit side by side under [`ROOT`]), a subshell
//! rather than a second shell to record the exit, five small files, no `wc` for a finished
//! command with no output, the clean-up after the answer, and `LC_ALL=C` for the tools the
//! scripts start themselves (a UTF-8 locale makes each GNU tool open some twenty locale files).
//!
//! Exit codes, as the core's file scripts use them: 44 = no such process, 47 = a process with
//! that id is still running.

/// Where background processes keep their files inside the machine: `ROOT/<pid>.{pid,grp,out,err,
/// exit,in}` (see `files!`); the first launch makes the directory.
pub(crate) const ROOT: &str = "/tmp/sandbox-fly";

/// First line of every poll answer.
pub(crate) const POLL_TAG: &str = "sandbox-fly-poll";

/// The files of the process whose path prefix is `$d`, as `rm -f` operands: `out` and `err` its
/// output, `exit` its exit code (recorded once non-empty; `s9` when killed), `in` its stdin
/// (uploaded before the launch), `grp` the command's own pid (its session and process group,
/// where `setsid` exists), and `pid`: `RECORDER WAITER` on its first line (the pid of the
/// subshell that waits for the command and records its exit, alive until it has; the pid of a
/// launch waiting for that exit, or `-`), the command's argv, tag and cwd as JSON on its second.
/// `pid` comes last: the id is free again only once everything else is gone.
macro_rules! files {
    () => {
        r#""$d.out" "$d.err" "$d.exit" "$d.in" "$d.grp" "$d.pid""#
    };
}

/// Shell functions printing one poll: `sandbox-fly-poll ALIVE EXIT OUTSIZE ERRSIZE OUTFORM
/// ERRFORM`, then up to N bytes of stdout from offset O, a `.` line, and up to N bytes of stderr
/// from offset E, each in base64 (form `b64`), or as it is (form `raw`, then followed by a
/// newline) when it is read whole from offset 0, holds at most 1 KiB of printable ASCII and
/// newlines, and every byte of it was read back (`text`: the shell's `read` drops NUL bytes, so
/// the count shows them): a short text answer then needs no `base64` at all. It first waits up
/// to W ticks of 0.2 s for news (long poll). With C=1 it
/// removes the process's files once the exit is recorded and everything left fits this answer;
/// C=2 removes them the same way, in the background, after answering (for ids nobody else can
/// reuse: the removal races with nothing and stays off the answer's path).
/// The exit file is read after the liveness check and before the sizes, so once an exit is seen
/// the sizes are final. Builtins do the reading (`read`, `kill -0`); the only tools started are
/// one `wc` per check (none for a finished command whose output files are empty) and one
/// `base64` per stream with news (plus `tail`/`head` past offset 0 or past N bytes), so a
/// finished command's answer costs two or three processes, or none.
const POLL_FN: &str = concat!(
    r#"text() {
  [ "$2" -le 1024 ] || return 1
  b= k=0 l=
  while IFS= read -r l; do
    case $l in *[!\ -~]*) return 1 ;; esac
    b="$b$l
" k=$((k+${#l}+1)) l=
  done <"$1"
  case $l in *[!\ -~]*) return 1 ;; esac
  b=$b$l k=$((k+${#l}))
  [ "$k" = "$2" ]
}
part() {
  [ "$4" -gt 0 ] && [ "$3" -gt "$2" ] || return 0
  if [ "$2" = 0 ] && [ "$3" -le "$4" ]; then LC_ALL=C base64 <"$1"; else LC_ALL=C tail -c +$(($2+1)) "$1" | LC_ALL=C head -c "$4" | LC_ALL=C base64; fi
}
poll() {
  d=$1 o=$2 e=$3 n=$4 w=$5 c=$6 t=0
  [ -f "$d.pid" ] || { echo "no such process" >&2; exit 44; }
  p=; read p _ <"$d.pid"
  while :; do
    a=1; kill -0 "$p" 2>/dev/null || a=0
    x=; [ -s "$d.exit" ] && read x <"$d.exit"
    if [ -n "$x" ] && [ ! -s "$d.out" ] && [ ! -s "$d.err" ]; then so=0 se=0
    else set -- $(LC_ALL=C wc -c "$d.out" "$d.err"); so=$1 se=$3; fi
    if [ "$a" = 0 ] || [ -n "$x" ] || [ "$so" -gt "$o" ] || [ "$se" -gt "$e" ] || [ "$t" -ge "$w" ]; then break; fi
    LC_ALL=C sleep 0.2 2>/dev/null || LC_ALL=C sleep 1
    t=$((t+1))
  done
  f=b64 g=b64
  [ "$o" = 0 ] && [ "$so" -gt 0 ] && [ "$so" -le "$n" ] && text "$d.out" "$so" && f=raw r=$b
  [ "$e" = 0 ] && [ "$se" -gt 0 ] && [ "$se" -le "$n" ] && text "$d.err" "$se" && g=raw
  echo "sandbox-fly-poll $a ${x:--} $so $se $f $g"
  if [ "$f" = raw ]; then printf '%s\n' "$r"; else part "$d.out" "$o" "$so" "$n"; fi
  echo .
  if [ "$g" = raw ]; then printf '%s\n' "$b"; else part "$d.err" "$e" "$se" "$n"; fi
  if [ "$c" != 0 ] && [ -n "$x" ] && [ $((so-o)) -le "$n" ] && [ $((se-e)) -le "$n" ]; then
    if [ "$c" = 2 ]; then LC_ALL=C rm -f "#,
    files!(),
    r#" </dev/null >/dev/null 2>&1 &
    else LC_ALL=C rm -f "#,
    files!(),
    r#"; fi
  fi
  exit 0
}
"#
);

/// `sh -c RUN sh DIR WAIT N CLEAN STDIN META REUSE ARGV…`: claims the id by creating `DIR.pid`
/// exclusively (`set -C`; exit 47 when it exists, unless REUSE=1 and its process has ended),
/// starts ARGV detached (in a session of its own when `setsid` exists) with stdout and stderr
/// going to files, stdin from `DIR.in` when STDIN=1, and its exit code recorded by a subshell
/// that waits for it; then waits up to WAIT seconds (`0` = not at all; decimals where `sleep`
/// takes them) for it to end, and answers like a poll from offset 0.
///
/// The wait costs nothing when the command is quick: a `sleep WAIT` runs beside it, the script
/// waits for that sleep, and the recording subshell, once the exit is recorded, sends the script
/// `SIGUSR1`, whose trap ends the sleep. So one `/exec` returns a short command's whole result
/// as soon as it ends, and a longer one is left running (never killed for being slow) to be
/// polled. The subshell finds the script's pid as the waiter in `DIR.pid`, which the script
/// sets to `-` before it answers, so a command that ends later signals nobody; the script writes
/// it (after setting the trap) and then looks for the exit, so a command that ended before that
/// is not waited for. The command starts first and the timer beside it, to keep the timer off a
/// quick command's path.
///
/// The recording subshell stays in the launching `/exec`'s process group, so this relies on
/// nothing signalling that group once the exec has answered (the simulator does not, and Fly
/// documents nothing of the kind); the command has a session of its own either way.
pub(crate) fn run_script() -> String {
    format!(
        r#"{POLL_FN}d=$1 w=$2 n=$3 c=$4 i=$5 m=$6 r=$7; shift 7
set -C
if ! {{ true >"$d.pid"; }} 2>/dev/null; then
  if [ ! -e "$d.pid" ]; then
    mkdir -p "${{d%/*}}" && true >"$d.pid" || exit 1
  else
    p=; read p _ <"$d.pid"
    if [ "$r" = 1 ] && {{ [ -s "$d.exit" ] || ! kill -0 "$p" 2>/dev/null; }}; then
      set +C; : >"$d.exit"
    else
      echo "process id is taken" >&2; exit 47
    fi
  fi
fi
set +C
: >"$d.out"; : >"$d.err"
if [ "$i" = 1 ]; then i="$d.in"; [ -f "$i" ] || exit 1; else i=/dev/null; fi
s=; command -v setsid >/dev/null 2>&1 && s=setsid
($s "$@" <"$i" >"$d.out" 2>"$d.err" & echo $! >"$d.grp"; wait $!; echo $? >"$d.exit"
 read _ q <"$d.pid" && [ "$q" != - ] && kill -s USR1 "$q") </dev/null >/dev/null 2>&1 &
k=$!
if [ "$w" != 0 ]; then
  LC_ALL=C sleep "$w" </dev/null >/dev/null 2>&1 & t=$!
  trap 'kill "$t" 2>/dev/null' USR1
  printf '%s %s\n%s\n' "$k" "$$" "$m" >"$d.pid"
  [ -s "$d.exit" ] || wait "$t" 2>/dev/null
  kill "$t" 2>/dev/null
fi
printf '%s -\n%s\n' "$k" "$m" >"$d.pid"
poll "$d" 0 0 "$n" 0 "$c"
"#
    )
}

/// `sh -c POLL sh DIR O E N W C`.
pub(crate) fn poll_script() -> String {
    format!("{POLL_FN}poll \"$@\"\n")
}

/// `sh -c KILL sh DIR [CLEAN]`: stops the recording subshell (so it records nothing), kills the
/// command's session (or, without one, the command and its children; or, when the command has
/// not started yet, the subshell's children), the group spelled `kill -s KILL -- -PID` (dash
/// rejects `kill -KILL -- -PID`) or, failing that, `kill -KILL -PID`; then the subshell, and
/// records `s9` as the exit. A process whose exit is already recorded is left alone. With
/// CLEAN=1 it then removes the process's files (nobody will poll it again: a timed-out or
/// dropped foreground process).
pub(crate) const KILL: &str = concat!(
    r#"d=$1 c=$2
[ -f "$d.pid" ] || { echo "no such process" >&2; exit 44; }
p=; read p _ <"$d.pid"
if [ ! -s "$d.exit" ]; then
  [ -n "$p" ] && kill -s STOP "$p" 2>/dev/null
  if [ -s "$d.exit" ]; then kill -s CONT "$p" 2>/dev/null
  else
    g=; [ -f "$d.grp" ] && read g <"$d.grp"
    if [ -n "$g" ]; then
      kill -s KILL -- "-$g" 2>/dev/null || kill -KILL "-$g" 2>/dev/null ||
        { pkill -KILL -P "$g" 2>/dev/null; kill -KILL "$g" 2>/dev/null; }
    elif [ -n "$p" ]; then pkill -KILL -P "$p" 2>/dev/null
    fi
    [ -n "$p" ] && kill -s KILL "$p" 2>/dev/null
    echo s9 >"$d.exit"
  fi
fi
if [ "$c" = 1 ]; then rm -f "#,
    files!(),
    r#"; fi
exit 0
"#
);

/// `sh -c PROCESSES sh ROOT`: one line per process: `ID RUNNING BASE64(meta)`. Only ids of
/// letters, digits, `_`, `-` and `.`, not starting with `.`, are listed, so a file whose name
/// holds a newline cannot add lines of its own.
pub(crate) const PROCESSES: &str = r#"for f in "$1"/*.pid; do
  d=${f%.pid}
  case ${d##*/} in ''|.*|*[!A-Za-z0-9._-]*) continue ;; esac
  [ -f "$f" ] || continue
  p= m=; { read p _; IFS= read -r m; } <"$f"
  a=1; kill -0 "$p" 2>/dev/null || a=0; [ -s "$d.exit" ] && a=0
  printf '%s %s ' "${d##*/}" "$a"; printf '%s' "$m" | LC_ALL=C base64 | tr -d '\n'; echo
done
exit 0
"#;

/// The shells and tools a machine may have that this host has too, for tests that run the
/// adapter's scripts and argv for real.
#[cfg(test)]
pub(crate) mod test_tools {
    use std::path::{Path, PathBuf};

    fn find(name: &str) -> Option<PathBuf> {
        ["/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.exists())
    }

    /// `sh -c SCRIPT sh ARGS…` with the toolset directory `tools` first on `PATH`.
    pub(crate) fn sh(tools: &Path, script: &str, args: &[&str]) -> std::process::Command {
        let mut command = std::process::Command::new(tools.join("sh"));
        command
            .arg("-c")
            .arg(script)
            .arg("sh")
            .args(args)
            .env("PATH", format!("{}:/usr/bin:/bin", tools.display()));
        command
    }

    /// Directories to put first on `PATH`, each with links named `tools` (`tools[0]` must be
    /// `sh`): this host's own (`sh` and the rest from the host), bash as `sh`, and BusyBox for
    /// every tool (what Alpine images have). A toolset whose programs this host lacks is left
    /// out.
    pub(crate) fn toolsets(root: &Path, tools: &[&str]) -> Vec<(String, PathBuf)> {
        assert_eq!(tools.first(), Some(&"sh"));
        let mut sets = Vec::new();
        let host: Vec<Option<PathBuf>> = tools.iter().map(|t| find(t)).collect();
        let mut with_bash = host.clone();
        with_bash[0] = find("bash");
        let busybox = vec![find("busybox"); tools.len()];
        for (label, paths) in [("host", host), ("bash", with_bash), ("busybox", busybox)] {
            if paths.iter().any(Option::is_none) {
                continue;
            }
            let dir = root.join(format!("tools-{label}"));
            std::fs::create_dir_all(&dir).unwrap();
            for (tool, path) in tools.iter().zip(paths) {
                std::os::unix::fs::symlink(path.unwrap(), dir.join(tool)).unwrap();
            }
            sets.push((label.to_owned(), dir));
        }
        sets
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_sdk_core::FileKind;
    use sandbox_sdk_core::emulate::files::{self, DOWNLOAD, LIST, STAT, UPLOAD};

    fn sh() -> Option<&'static str> {
        std::path::Path::new("/bin/sh")
            .exists()
            .then_some("/bin/sh")
    }

    fn run(script: &str, args: &[&str], stdin: &[u8]) -> std::process::Output {
        use std::io::Write;
        let mut child = std::process::Command::new(sh().unwrap())
            .arg("-c")
            .arg(script)
            .arg("sh")
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        child.wait_with_output().unwrap()
    }

    /// The scripts really run under this machine's `sh`: a regression net for their syntax and
    /// their output format (the adapter parses exactly this).
    #[test]
    fn run_poll_and_file_scripts_work_under_sh() {
        if sh().is_none() {
            return;
        }
        let tmp = std::env::temp_dir().join(format!("sandbox-fly-test-{}", std::process::id()));
        let dir = tmp.join("p1");
        let dir_s = dir.to_str().unwrap();
        let out = run(
            &run_script(),
            &[
                dir_s,
                "25",
                "65536",
                "0",
                "0",
                "{}",
                "0",
                "sh",
                "-c",
                "printf hi; printf oops >&2; exit 3",
            ],
            b"",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.starts_with("sandbox-fly-poll "), "{text}");
        // Poll until the exit is recorded.
        let mut last = String::new();
        for _ in 0..50 {
            let out = run(&poll_script(), &[dir_s, "0", "0", "65536", "5", "0"], b"");
            last = String::from_utf8(out.stdout).unwrap();
            if !last.contains(" - ") {
                break;
            }
        }
        let parsed = crate::exec::parse_poll(&last).unwrap();
        // The id is taken now: a second run under it is refused with 47, a reuse takes it over.
        let again = run(
            &run_script(),
            &[dir_s, "0", "1", "0", "0", "{}", "0", "true"],
            b"",
        );
        assert_eq!(again.status.code(), Some(47));
        let reuse = run(
            &run_script(),
            &[dir_s, "0", "1", "0", "0", "{}", "1", "true"],
            b"",
        );
        assert!(
            reuse.status.success(),
            "{}",
            String::from_utf8_lossy(&reuse.stderr)
        );
        assert_eq!(parsed.exit, Some(sandbox_sdk_core::ExitStatus::code(3)));
        assert_eq!(&parsed.stdout[..], b"hi");
        assert_eq!(&parsed.stderr[..], b"oops");

        let file = tmp.join("sub/f.bin");
        let part = tmp.join("sub/f.bin.part");
        let (f, p) = (file.to_str().unwrap(), part.to_str().unwrap());
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        let o = run(
            UPLOAD,
            &[p, f, "1", "0"],
            b64.encode([0u8, 1, 2]).as_bytes(),
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let o = run(UPLOAD, &[p, f, "0", "1"], b64.encode([255u8]).as_bytes());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(std::fs::read(&file).unwrap(), [0, 1, 2, 255]);
        let o = run(DOWNLOAD, &[f, "3", "1"], b"");
        let got: String = String::from_utf8(o.stdout)
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(b64.decode(got).unwrap(), [255]);
        let o = run(STAT, &[f], b"");
        let stat = files::parse_stat_line(String::from_utf8(o.stdout).unwrap().trim(), f).unwrap();
        assert_eq!(stat.size, 4);
        let o = run(STAT, &[tmp.join("nope").to_str().unwrap()], b"");
        assert_eq!(o.status.code(), Some(44));
        let o = run(LIST, &[tmp.join("sub").to_str().unwrap(), "1"], b"");
        let listed = files::parse_list(&String::from_utf8(o.stdout).unwrap()).unwrap();
        let names: Vec<&str> = listed.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["f.bin"]);
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// One launch answers with a quick command's whole result (exit code included, so `run` needs
    /// no poll), and leaves a command still running after the wait running, not killed.
    #[test]
    fn a_launch_returns_a_quick_result_whole_and_leaves_a_slow_command_running() {
        if sh().is_none() {
            return;
        }
        let root = std::env::temp_dir().join(format!("sandbox-fly-wait-{}", std::process::id()));
        let quick = root.join("p1");
        let out = run(
            &run_script(),
            &[
                quick.to_str().unwrap(),
                "30",
                "1024",
                "2",
                "0",
                "{}",
                "0",
                "sh",
                "-c",
                "printf hi; printf oops >&2; exit 3",
            ],
            b"",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let answer = crate::exec::parse_poll(&String::from_utf8(out.stdout).unwrap()).unwrap();
        assert_eq!(answer.exit, Some(sandbox_sdk_core::ExitStatus::code(3)));
        assert_eq!(
            (&answer.stdout[..], &answer.stderr[..]),
            (&b"hi"[..], &b"oops"[..])
        );
        // Everything fitted the answer: the files go (in the background, so wait for it).
        let quick_pid = root.join("p1.pid");
        assert!(!root.join("p1").exists(), "no directory per process");
        for _ in 0..100 {
            if !quick_pid.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let left: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            left.is_empty(),
            "a finished, fully read process is cleaned up: {left:?}"
        );

        let slow = root.join("p2");
        let slow_s = slow.to_str().unwrap();
        let out = run(
            &run_script(),
            &[slow_s, "0.2", "1024", "2", "0", "{}", "0", "sleep", "30"],
            b"",
        );
        let answer = crate::exec::parse_poll(&String::from_utf8(out.stdout).unwrap()).unwrap();
        assert!(answer.alive && answer.exit.is_none(), "{answer:?}");
        let again = run(&poll_script(), &[slow_s, "0", "0", "0", "0", "0"], b"");
        let again = crate::exec::parse_poll(&String::from_utf8(again.stdout).unwrap()).unwrap();
        assert!(again.alive, "still running after the launch answered");
        assert!(run(KILL, &[slow_s, "1"], b"").status.success());
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// Kill, process listing and stdin from `DIR.in`, under this machine's `sh`.
    #[test]
    fn kill_processes_and_stdin_scripts_work_under_sh() {
        if sh().is_none() {
            return;
        }
        let root = std::env::temp_dir().join(format!("sandbox-fly-kill-{}", std::process::id()));
        let root_s = root.to_str().unwrap().to_owned();
        let dir = format!("{root_s}/job");
        let out = run(
            &run_script(),
            &[
                &dir,
                "0",
                "1024",
                "0",
                "0",
                r#"{"argv":["sleep","30"]}"#,
                "0",
                "sleep",
                "30",
            ],
            b"",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let first = crate::exec::parse_poll(&String::from_utf8(out.stdout).unwrap()).unwrap();
        assert!(first.alive && first.exit.is_none());
        let listed = run(PROCESSES, &[&root_s], b"");
        let infos = crate::exec::parse_processes(&String::from_utf8(listed.stdout).unwrap());
        assert_eq!(infos.len(), 1);
        assert_eq!(infos[0].pid, "job");
        assert!(infos[0].running);
        assert_eq!(infos[0].argv, ["sleep", "30"]);
        let killed = run(KILL, &[&dir], b"");
        assert!(killed.status.success());
        let mut exit = None;
        for _ in 0..50 {
            let o = run(&poll_script(), &[&dir, "0", "0", "0", "0", "0"], b"");
            exit = crate::exec::parse_poll(&String::from_utf8(o.stdout).unwrap())
                .unwrap()
                .exit;
            if exit.is_some() {
                break;
            }
        }
        let exit = exit.expect("an exit after the kill");
        assert!(!exit.success(), "{exit:?}");
        let gone = run(KILL, &[&format!("{root_s}/nope")], b"");
        assert_eq!(gone.status.code(), Some(44));

        // The whole session dies, grandchildren included (not just the wrapping shell).
        let grandchild = root.join("grandchild.pid");
        let dir4 = format!("{root_s}/tree");
        let out = run(
            &run_script(),
            &[
                &dir4,
                "0",
                "0",
                "0",
                "0",
                "{}",
                "0",
                "sh",
                "-c",
                "sleep 33 & echo $! >\"$1\"; wait",
                "sh",
                grandchild.to_str().unwrap(),
            ],
            b"",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut pid = String::new();
        for _ in 0..100 {
            pid = std::fs::read_to_string(&grandchild).unwrap_or_default();
            if pid.ends_with('\n') {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let pid = pid.trim().to_owned();
        assert!(!pid.is_empty(), "the grandchild started");
        assert!(run(KILL, &[&dir4], b"").status.success());
        // Gone, or a zombie waiting for a reaper: either way no longer running.
        let stat = format!("/proc/{pid}/stat");
        let mut dead = false;
        for _ in 0..100 {
            dead = std::fs::read_to_string(&stat)
                .map(|s| {
                    s.rsplit(')')
                        .next()
                        .unwrap_or("")
                        .trim_start()
                        .starts_with('Z')
                })
                .unwrap_or(true);
            if dead {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(dead, "grandchild {pid} survived the kill");

        // A kill with CLEAN=1 (timeout, dropped handle) leaves nothing behind in the machine.
        let dir3 = format!("{root_s}/overdue");
        let out = run(
            &run_script(),
            &[&dir3, "0", "0", "1", "0", "{}", "0", "sleep", "30"],
            b"",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(std::path::Path::new(&format!("{dir3}.pid")).exists());
        let killed = run(KILL, &[&dir3, "1"], b"");
        assert!(
            killed.status.success(),
            "{}",
            String::from_utf8_lossy(&killed.stderr)
        );
        assert!(
            !std::path::Path::new(&format!("{dir3}.pid")).exists()
                && !std::path::Path::new(&format!("{dir3}.out")).exists(),
            "the process's files are removed"
        );

        // Stdin: uploaded as `DIR.in` before the launch.
        let dir2 = format!("{root_s}/cat");
        std::fs::write(format!("{dir2}.in"), b"fed through a file\n").unwrap();
        let out = run(
            &run_script(),
            &[&dir2, "25", "1024", "1", "1", "{}", "0", "cat"],
            b"",
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut text = String::from_utf8(out.stdout).unwrap();
        for _ in 0..50 {
            if crate::exec::parse_poll(&text).unwrap().exit.is_some() {
                break;
            }
            let o = run(&poll_script(), &[&dir2, "0", "0", "1024", "5", "1"], b"");
            text = String::from_utf8(o.stdout).unwrap();
        }
        let answer = crate::exec::parse_poll(&text).unwrap();
        assert_eq!(answer.exit, Some(sandbox_sdk_core::ExitStatus::code(0)));
        assert_eq!(&answer.stdout[..], b"fed through a file\n");
        assert!(
            !std::path::Path::new(&format!("{dir2}.pid")).exists()
                && !std::path::Path::new(&format!("{dir2}.in")).exists(),
            "cleaned up after the exit"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// A file name holding a newline and text shaped like more entries is one entry, named
    /// exactly so, under the host's tools, bash and BusyBox (the old `stat … %n` lines let it
    /// forge a `forged` entry of any kind and size); and a process file so named adds no
    /// process to the process listing.
    #[test]
    fn hostile_file_names_cannot_forge_listing_entries() {
        let root = std::env::temp_dir().join(format!("sandbox-fly-names-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("d");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let forging = "a\n41ed 4096 1700000000 forged\n81a4 7 1 b";
        std::fs::write(dir.join(forging), b"xy").unwrap();
        std::fs::write(dir.join("plain name"), b"abc").unwrap();
        std::fs::write(dir.join("sub").join("deep"), b"").unwrap();
        // Many entries, so `find` may hand them over in more than one batch.
        for i in 0..300 {
            std::fs::write(dir.join(format!("n{i:03}-{}", "x".repeat(100))), b"").unwrap();
        }
        let procs = root.join("procs");
        let forged_proc = "p1 1 e30=\nforged";
        std::fs::create_dir_all(&procs).unwrap();
        for id in ["p1", forged_proc] {
            std::fs::write(procs.join(format!("{id}.pid")), b"999999999 -\n{}\n").unwrap();
        }
        let tools = ["sh", "find", "stat", "tr", "base64", "cat", "rm"];
        let sets = test_tools::toolsets(&root, &tools);
        assert!(!sets.is_empty(), "no sh on this host");
        let dir_s = dir.to_str().unwrap();
        let mut failures = Vec::new();
        for (label, tools) in &sets {
            let run_with =
                |script: &str, args: &[&str]| test_tools::sh(tools, script, args).output().unwrap();
            let out = run_with(LIST, &[dir_s, "2"]);
            let text = String::from_utf8_lossy(&out.stdout);
            let Some(listed) = files::parse_list(&text) else {
                failures.push(format!("{label}: unreadable listing {text:?}"));
                continue;
            };
            let forged = listed
                .iter()
                .find(|f| f.path == format!("{dir_s}/{forging}"));
            let paths: Vec<&str> = listed.iter().map(|f| f.path.as_str()).collect();
            if listed.len() != 304
                || forged.map(|f| (f.size, f.kind)) != Some((2, FileKind::File))
                || paths.iter().any(|p| !p.starts_with(dir_s))
                || !paths.contains(&format!("{dir_s}/sub/deep").as_str())
            {
                failures.push(format!(
                    "{label}: {} entries, {:?}",
                    listed.len(),
                    &paths[..paths.len().min(6)]
                ));
            }
            let out = run_with(PROCESSES, &[procs.to_str().unwrap()]);
            let infos = crate::exec::parse_processes(&String::from_utf8_lossy(&out.stdout));
            let ids: Vec<&str> = infos.iter().map(|i| i.pid.as_str()).collect();
            if ids != ["p1"] {
                failures.push(format!("{label}: processes {ids:?}"));
            }
        }
        std::fs::remove_dir_all(&root).unwrap();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// Launch, answer, kill and clean-up under the host's tools, bash and BusyBox: a quick
    /// command's whole result in the launch's answer and its files gone after it; a slow one
    /// left running, then killed with its whole session (a grandchild included) and `s9`
    /// recorded.
    #[test]
    fn launch_and_kill_work_under_every_toolset() {
        let root = std::env::temp_dir().join(format!("sandbox-fly-sets-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let tools = [
            "sh", "setsid", "wc", "base64", "sleep", "rm", "pkill", "tail", "head", "mkdir",
        ];
        let sets = test_tools::toolsets(&root, &tools);
        assert!(!sets.is_empty(), "no sh on this host");
        let mut failures = Vec::new();
        for (label, tools) in &sets {
            let procs = root.join(format!("procs-{label}"));
            let run_with = |script: &str, args: &[&str]| {
                test_tools::sh(tools, script, args)
                    .stdin(std::process::Stdio::null())
                    .output()
                    .unwrap()
            };
            let answer = |out: std::process::Output| {
                crate::exec::parse_poll(&String::from_utf8_lossy(&out.stdout))
            };
            let quick = procs.join("q");
            let quick_s = quick.to_str().unwrap();
            let argv = ["sh", "-c", "printf hi; printf oops >&2; exit 3"];
            let args = [&[quick_s, "5", "1024", "2", "0", "{}", "0"][..], &argv].concat();
            let out = run_with(&run_script(), &args);
            let as_text = String::from_utf8_lossy(&out.stdout).contains(" raw raw\n");
            let got = answer(out);
            let whole = got.as_ref().is_some_and(|a| {
                a.exit == Some(sandbox_sdk_core::ExitStatus::code(3))
                    && (&a.stdout[..], &a.stderr[..]) == (&b"hi"[..], &b"oops"[..])
            });
            if !whole || !as_text {
                failures.push(format!(
                    "{label}: quick answer {got:?} (as text: {as_text})"
                ));
            }
            // Bytes that are not printable ASCII (a NUL, a lone high byte, a tab) come whole,
            // in base64.
            let binary = procs.join("b");
            let argv = [
                "sh",
                "-c",
                "printf 'x\\000y\\351\\tz\\n'; printf 'e\\000' >&2",
            ];
            let args = [
                &[binary.to_str().unwrap(), "5", "1024", "2", "0", "{}", "0"][..],
                &argv,
            ]
            .concat();
            let got = answer(run_with(&run_script(), &args));
            let whole = got.as_ref().is_some_and(|a| {
                (&a.stdout[..], &a.stderr[..]) == (&b"x\0y\xe9\tz\n"[..], &b"e\0"[..])
            });
            if !whole {
                failures.push(format!("{label}: binary answer {got:?}"));
            }
            let gone = (0..100).any(|_| {
                let empty = std::fs::read_dir(&procs).is_ok_and(|mut d| d.next().is_none());
                std::thread::sleep(std::time::Duration::from_millis(20));
                empty
            });
            if !gone {
                failures.push(format!("{label}: files left after a quick run"));
            }

            let slow = procs.join("s");
            let slow_s = slow.to_str().unwrap();
            let pid_file = root.join(format!("grandchild-{label}"));
            let script = "sleep 33 & echo $! >\"$1\"; wait";
            let argv = ["sh", "-c", script, "sh", pid_file.to_str().unwrap()];
            let args = [&[slow_s, "0.2", "1024", "2", "0", "{}", "0"][..], &argv].concat();
            let got = answer(run_with(&run_script(), &args));
            if got.as_ref().is_none_or(|a| a.exit.is_some()) {
                failures.push(format!("{label}: slow answer {got:?}"));
            }
            let mut grandchild = String::new();
            for _ in 0..100 {
                grandchild = std::fs::read_to_string(&pid_file).unwrap_or_default();
                if grandchild.ends_with('\n') {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let killed = run_with(KILL, &[slow_s]);
            let poll = answer(run_with(&poll_script(), &[slow_s, "0", "0", "0", "0", "1"]));
            if !killed.status.success()
                || poll.map(|a| a.exit) != Some(Some(sandbox_sdk_core::ExitStatus::signal(9)))
            {
                failures.push(format!("{label}: kill {killed:?}"));
            }
            let stat = format!("/proc/{}/stat", grandchild.trim());
            let dead = (0..100).any(|_| {
                let dead = std::fs::read_to_string(&stat).map_or(true, |s| {
                    s.rsplit(')')
                        .next()
                        .unwrap_or("")
                        .trim_start()
                        .starts_with('Z')
                });
                if !dead {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                dead
            });
            if grandchild.trim().is_empty() || !dead {
                failures.push(format!(
                    "{label}: grandchild {grandchild:?} survived the kill"
                ));
            }
        }
        std::fs::remove_dir_all(&root).unwrap();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}
