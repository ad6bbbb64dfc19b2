//! The anchor of a confined sandbox (Linux): see the [crate] documentation for what it builds.

use crate::{Layers, Limits, SANDBOX_UID};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long an anchor has to build its view.
const ANCHOR_START: Duration = Duration::from_secs(10);

/// Files of `/etc` never shown in a view (covered with an empty file or directory).
const ETC_SECRETS: &[&str] = &[
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "sudoers",
    "sudoers.d",
    "ssh",
    "ssl/private",
    "security/opasswd",
    "machine-id",
];

/// Top-level host entries bound read-only into a view (links recreated as links).
const SYSTEM: &[&str] = &[
    "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt",
];

/// Device files bound into a view's `/dev`.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// What a sandbox's view is made of.
#[derive(Debug, Clone)]
pub struct ViewSpec {
    /// The sandbox's work directory (host path), shown at `home`.
    pub work: PathBuf,
    /// Its `/tmp` (host path).
    pub tmp: PathBuf,
    /// Where the work directory appears inside (absolute, e.g. `/home/user`).
    pub home: String,
    /// Network off: a namespace with only loopback.
    pub network_off: bool,
    /// The anchor, and with it the sandbox, ends when the process that made it ends (else it
    /// runs on until killed or until its work directory is removed).
    pub tethered: bool,
}

/// One step of building a view, run by the anchor (paths under the view's mount point).
enum Step {
    Mkdir(CString),
    Touch(CString),
    Symlink {
        target: CString,
        path: CString,
    },
    Bind {
        src: CString,
        dst: CString,
        read_only: bool,
        device: bool,
    },
    Tmpfs {
        dst: CString,
        read_only: bool,
    },
    Proc(CString),
}

/// What the anchor needs, prepared before `clone`.
struct AnchorPlan {
    root: CString,
    steps: Vec<Step>,
    network_off: bool,
    /// Read end: the parent writes one byte once the id maps are written.
    go: RawFd,
    /// The work and tmp directories, opened onto [`HELD`] first.
    held: [CString; 2],
    /// Write end: the anchor writes `0` when ready, or the failed step and errno.
    report: RawFd,
    /// Read end of the process's [`tether`] when tethered: it hangs up when the process ends.
    tether: Option<RawFd>,
}

/// How often an idle anchor looks whether its work directory or its tether is gone.
const ANCHOR_LOOK: libc::c_int = 250;

/// This process's tether: a pipe whose write end only this process holds (close-on-exec,
/// and every anchor closes its copy), so its read end hangs up once the process has ended.
fn tether() -> Option<RawFd> {
    static TETHER: std::sync::OnceLock<Option<(OwnedFd, OwnedFd)>> = std::sync::OnceLock::new();
    TETHER
        .get_or_init(|| pipe().ok())
        .as_ref()
        .map(|(read, _)| read.as_raw_fd())
}

/// Closes every descriptor of the anchor but `keep` and points 0, 1 and 2 at `/dev/null`: the
/// anchor is a copy of its maker and would otherwise hold its maker's sockets and pipes open.
unsafe fn close_all_but(keep: &mut [RawFd]) {
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
        keep.sort_unstable();
        let mut from = 3u32;
        for &fd in keep.iter() {
            let fd = fd as u32;
            if fd > from {
                libc::syscall(libc::SYS_close_range, from, fd - 1, 0u32);
            }
            from = from.max(fd + 1);
        }
        libc::syscall(libc::SYS_close_range, from, u32::MAX, 0u32);
    }
}

/// True when the anchor should end: its work directory ([`HELD`]`[0]`) was removed, or the
/// tether hung up.
unsafe fn anchor_orphaned(tether: Option<RawFd>) -> bool {
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(HELD[0], &mut st) == 0 && st.st_nlink == 0 {
            return true;
        }
        let mut poll = libc::pollfd {
            fd: tether.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        };
        libc::poll(&mut poll, 1, ANCHOR_LOOK) > 0
            && poll.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLIN) != 0
    }
}

/// A confined sandbox's anchor and what each command needs to join it.
#[derive(Debug)]
pub struct Anchor {
    pid: i32,
    /// A pidfd of the anchor, so a signal never reaches another process that took its pid.
    pidfd: Option<OwnedFd>,
    namespaces: Vec<(OwnedFd, libc::c_int)>,
    landlock: Option<(OwnedFd, u32)>,
    filter: Vec<libc::sock_filter>,
    limits: Limits,
    layers: Layers,
    /// The uid and gid outside that own what the sandbox writes.
    pub owner: (u32, u32),
}

impl Step {
    /// What the step does, for an error.
    fn describe(&self) -> String {
        let show = |c: &CString| c.to_string_lossy().into_owned();
        match self {
            Step::Mkdir(p) => format!("making {}", show(p)),
            Step::Touch(p) => format!("making {}", show(p)),
            Step::Symlink { path, .. } => format!("linking {}", show(path)),
            Step::Bind { src, dst, .. } => format!("binding {} at {}", show(src), show(dst)),
            Step::Tmpfs { dst, .. } => format!("mounting a tmpfs at {}", show(dst)),
            Step::Proc(p) => format!("mounting proc at {}", show(p)),
        }
    }
}

/// Where the anchor builds the view before entering it: `/tmp` of its own mount namespace,
/// which every user may walk to (the host's `/tmp` is not touched: the tmpfs goes over it only
/// there).
const VIEW_ROOT: &str = "/tmp";

/// The descriptors the anchor holds the sandbox's work and tmp directories on, opened in its
/// own mount namespace before it takes the mapped root's ids (which may not walk to them) and
/// before its tmpfs covers `/tmp`.
const HELD: [libc::c_int; 2] = [900, 901];

/// A held directory as a path the anchor can mount from.
fn held(n: usize) -> CString {
    CString::new(format!("/proc/self/fd/{}", HELD[n])).expect("no NUL")
}

fn cstr(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a NUL in a path"))
}

fn under(root: &Path, inside: &str) -> std::io::Result<CString> {
    cstr(&root.join(inside.trim_start_matches('/')))
}

/// The steps of a view: system directories, `/etc` secrets covered, `/dev`, `/proc`, `/tmp`
/// and home.
fn plan_steps(spec: &ViewSpec) -> std::io::Result<Vec<Step>> {
    let root = Path::new(VIEW_ROOT);
    let mut steps = Vec::new();
    for name in SYSTEM {
        let host = Path::new("/").join(name);
        let Ok(meta) = std::fs::symlink_metadata(&host) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&host)?;
            steps.push(Step::Symlink {
                target: cstr(&target)?,
                path: under(root, name)?,
            });
        } else if meta.is_dir() {
            steps.push(Step::Mkdir(under(root, name)?));
            steps.push(Step::Bind {
                src: cstr(&host)?,
                dst: under(root, name)?,
                read_only: true,
                device: false,
            });
        }
    }
    for secret in ETC_SECRETS {
        let host = Path::new("/etc").join(secret);
        match std::fs::symlink_metadata(&host) {
            Ok(meta) if meta.is_dir() => steps.push(Step::Tmpfs {
                dst: under(root, &format!("etc/{secret}"))?,
                read_only: true,
            }),
            Ok(meta) if meta.is_file() => steps.push(Step::Bind {
                src: c"/dev/null".into(),
                dst: under(root, &format!("etc/{secret}"))?,
                read_only: true,
                device: true,
            }),
            _ => {}
        }
    }
    steps.push(Step::Mkdir(under(root, "dev")?));
    steps.push(Step::Tmpfs {
        dst: under(root, "dev")?,
        read_only: false,
    });
    for device in DEVICES {
        let host = Path::new("/dev").join(device);
        if std::fs::metadata(&host).is_err() {
            continue;
        }
        steps.push(Step::Touch(under(root, &format!("dev/{device}"))?));
        steps.push(Step::Bind {
            src: cstr(&host)?,
            dst: under(root, &format!("dev/{device}"))?,
            read_only: false,
            device: true,
        });
    }
    for (link, target) in [
        ("dev/fd", "/proc/self/fd"),
        ("dev/stdin", "/proc/self/fd/0"),
        ("dev/stdout", "/proc/self/fd/1"),
        ("dev/stderr", "/proc/self/fd/2"),
    ] {
        steps.push(Step::Symlink {
            target: CString::new(target).expect("no NUL"),
            path: under(root, link)?,
        });
    }
    steps.push(Step::Mkdir(under(root, "dev/shm")?));
    steps.push(Step::Tmpfs {
        dst: under(root, "dev/shm")?,
        read_only: false,
    });
    steps.push(Step::Mkdir(under(root, "proc")?));
    steps.push(Step::Proc(under(root, "proc")?));
    steps.push(Step::Mkdir(under(root, "tmp")?));
    steps.push(Step::Bind {
        src: held(1),
        dst: under(root, "tmp")?,
        read_only: false,
        device: false,
    });
    let mut at = String::new();
    for part in spec.home.split('/').filter(|p| !p.is_empty()) {
        at.push('/');
        at.push_str(part);
        steps.push(Step::Mkdir(under(root, &at)?));
    }
    steps.push(Step::Bind {
        src: held(0),
        dst: under(root, &spec.home)?,
        read_only: false,
        device: false,
    });
    Ok(steps)
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The flags a read-only remount of the bind at `dst` must keep (the kernel refuses to clear a
/// flag it locked on a mount from a more privileged namespace).
unsafe fn locked_flags(dst: &CString) -> libc::c_ulong {
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(dst.as_ptr(), &mut stat) } != 0 {
        return 0;
    }
    let mut flags = 0;
    for (st, ms) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if stat.f_flag & st != 0 {
            flags |= ms;
        }
    }
    flags
}

/// Runs one step; the errno on failure.
unsafe fn run_step(step: &Step) -> Result<(), i32> {
    let null = std::ptr::null::<libc::c_char>();
    let ok = |r: libc::c_int| if r == 0 { Ok(()) } else { Err(errno()) };
    unsafe {
        match step {
            Step::Mkdir(path) => {
                if libc::mkdir(path.as_ptr(), 0o755) != 0 && errno() != libc::EEXIST {
                    return Err(errno());
                }
                Ok(())
            }
            Step::Touch(path) => {
                let fd = libc::open(
                    path.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o644,
                );
                if fd < 0 {
                    return Err(errno());
                }
                libc::close(fd);
                Ok(())
            }
            Step::Symlink { target, path } => ok(libc::symlink(target.as_ptr(), path.as_ptr())),
            Step::Bind {
                src,
                dst,
                read_only,
                device,
            } => {
                ok(libc::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    null,
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ))?;
                let mut flags =
                    libc::MS_BIND | libc::MS_REMOUNT | libc::MS_NOSUID | locked_flags(dst);
                if *read_only {
                    flags |= libc::MS_RDONLY;
                }
                if !*device {
                    flags |= libc::MS_NODEV;
                }
                ok(libc::mount(
                    null,
                    dst.as_ptr(),
                    null,
                    flags,
                    std::ptr::null(),
                ))
            }
            Step::Tmpfs { dst, read_only } => {
                let mut flags = libc::MS_NOSUID | libc::MS_NODEV;
                if *read_only {
                    flags |= libc::MS_RDONLY;
                }
                ok(libc::mount(
                    c"tmpfs".as_ptr(),
                    dst.as_ptr(),
                    c"tmpfs".as_ptr(),
                    flags,
                    c"mode=0755".as_ptr().cast(),
                ))
            }
            Step::Proc(dst) => ok(libc::mount(
                c"proc".as_ptr(),
                dst.as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            )),
        }
    }
}

/// Brings loopback up in a new network namespace.
unsafe fn loopback_up() -> Result<(), i32> {
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return Err(errno());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        if libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req) != 0 {
            let e = errno();
            libc::close(sock);
            return Err(e);
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        let r = libc::ioctl(sock, libc::SIOCSIFFLAGS, &mut req);
        let e = errno();
        libc::close(sock);
        if r != 0 { Err(e) } else { Ok(()) }
    }
}

fn report(fd: RawFd, step: u32, err: i32) {
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&step.to_le_bytes());
    bytes[4..].copy_from_slice(&(err as u32).to_le_bytes());
    // SAFETY: writes 8 bytes from a local buffer.
    unsafe {
        libc::write(fd, bytes.as_ptr().cast(), bytes.len());
    }
}

/// The anchor: PID 1 of the sandbox. Builds the view, reports, then reaps for ever.
extern "C" fn anchor_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` points at the plan, alive in this process's copy of the parent's memory.
    let plan = unsafe { &*(arg as *const AnchorPlan) };
    unsafe {
        let mut keep = [plan.go, plan.report, plan.tether.unwrap_or(plan.go)];
        close_all_but(&mut keep);
        let mut byte = 0u8;
        if libc::read(plan.go, (&mut byte as *mut u8).cast(), 1) != 1 {
            libc::_exit(1);
        }
        libc::close(plan.go);
        // Become the mapped root: the creds kept from the parent may map to nothing here.
        for (path, at) in plan.held.iter().zip(HELD) {
            let fd = libc::open(path.as_ptr(), libc::O_PATH | libc::O_DIRECTORY);
            if fd < 0 || libc::dup2(fd, at) < 0 {
                report(plan.report, 7, errno());
                libc::_exit(1);
            }
            libc::close(fd);
        }
        // Raw system calls: glibc's wrappers would broadcast the change to the threads of the
        // process this is a copy of, which do not exist here, and can wait for them for ever.
        if libc::syscall(libc::SYS_setresgid, 0, 0, 0) != 0
            || libc::syscall(libc::SYS_setresuid, 0, 0, 0) != 0
        {
            report(plan.report, 6, errno());
            libc::_exit(1);
        }
        let null = std::ptr::null::<libc::c_char>();
        if libc::mount(
            null,
            c"/".as_ptr(),
            null,
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            report(plan.report, 1, errno());
            libc::_exit(1);
        }
        if libc::mount(
            c"tmpfs".as_ptr(),
            plan.root.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c"mode=0755".as_ptr().cast(),
        ) != 0
        {
            report(plan.report, 2, errno());
            libc::_exit(1);
        }
        for (i, step) in plan.steps.iter().enumerate() {
            if let Err(e) = run_step(step) {
                report(plan.report, 100 + i as u32, e);
                libc::_exit(1);
            }
        }
        if libc::chdir(plan.root.as_ptr()) != 0
            || libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0
            || libc::umount2(c".".as_ptr(), libc::MNT_DETACH) != 0
            || libc::chdir(c"/".as_ptr()) != 0
        {
            report(plan.report, 3, errno());
            libc::_exit(1);
        }
        if libc::mount(
            null,
            c"/".as_ptr(),
            null,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            std::ptr::null(),
        ) != 0
        {
            report(plan.report, 4, errno());
            libc::_exit(1);
        }
        let name = b"sandbox";
        libc::sethostname(name.as_ptr().cast(), name.len());
        if plan.network_off
            && let Err(e) = loopback_up()
        {
            report(plan.report, 5, e);
            libc::_exit(1);
        }
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        report(plan.report, 0, 0);
        libc::close(plan.report);
        // Reap the orphans that fall to PID 1 until there is no reason to go on.
        loop {
            let mut status = 0;
            while libc::waitpid(-1, &mut status, libc::WNOHANG) > 0 {}
            if anchor_orphaned(plan.tether) {
                libc::_exit(0);
            }
        }
    }
}

fn step_name(step: u32) -> &'static str {
    match step {
        1 => "making mounts private",
        2 => "mounting the view's root",
        3 => "entering the view (pivot_root)",
        4 => "making the view's root read-only",
        5 => "bringing loopback up",
        6 => "taking the mapped root's ids",
        7 => "opening the sandbox's directories",
        _ => "building the view",
    }
}

fn os_err(what: &str, e: std::io::Error) -> String {
    format!("{what}: {e}")
}

/// The Landlock ABI version of this kernel, if it has Landlock.
fn landlock_abi() -> Option<u32> {
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    (v > 0).then_some(v as u32)
}

impl Anchor {
    /// Starts the anchor of a sandbox whose view `spec` describes. `Err` says which layer
    /// could not be built and why.
    pub fn start(spec: &ViewSpec, limits: Limits) -> Result<Anchor, String> {
        let owner = owner();
        let as_root = owner.0 == SANDBOX_UID;
        for dir in [&spec.work, &spec.tmp] {
            std::fs::create_dir_all(dir)
                .map_err(|e| os_err("cannot make the view's directories", e))?;
        }
        if as_root {
            for dir in [&spec.work, &spec.tmp] {
                std::os::unix::fs::chown(dir, Some(owner.0), Some(owner.1))
                    .map_err(|e| os_err("cannot hand the sandbox its directories", e))?;
            }
        }
        let steps = plan_steps(spec).map_err(|e| os_err("cannot plan the view", e))?;
        let (go_read, go_write) = pipe().map_err(|e| os_err("pipe", e))?;
        let (report_read, report_write) = pipe().map_err(|e| os_err("pipe", e))?;
        let plan = Box::new(AnchorPlan {
            root: CString::new(VIEW_ROOT).expect("no NUL"),
            held: [
                cstr(&spec.work).map_err(|e| os_err("work path", e))?,
                cstr(&spec.tmp).map_err(|e| os_err("tmp path", e))?,
            ],
            steps,
            network_off: spec.network_off,
            go: go_read.as_raw_fd(),
            report: report_write.as_raw_fd(),
            tether: match spec.tethered {
                true => Some(tether().ok_or("cannot make the process's tether pipe")?),
                false => None,
            },
        });
        let mut flags = libc::CLONE_NEWUSER
            | libc::CLONE_NEWNS
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUTS;
        if spec.network_off {
            flags |= libc::CLONE_NEWNET;
        }
        let mut stack = vec![0u8; 256 * 1024];
        // SAFETY: the child runs `anchor_main` on its own copy of `stack` and of `plan`, which
        // makes only system calls.
        let pid = unsafe {
            let top = stack.as_mut_ptr().add(stack.len() & !15);
            libc::clone(
                anchor_main,
                top.cast(),
                flags | libc::SIGCHLD,
                (&*plan as *const AnchorPlan as *mut AnchorPlan).cast(),
            )
        };
        if pid < 0 {
            let e = std::io::Error::last_os_error();
            return Err(format!(
                "cannot make the sandbox's namespaces (user, mount, pid, ipc, uts{}): {e}",
                if spec.network_off { ", net" } else { "" }
            ));
        }
        drop(go_read);
        drop(report_write);
        let fail = |why: String| {
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            why
        };
        let maps = [
            ("setgroups", "deny".to_string()),
            ("uid_map", format!("0 {} 1", owner.0)),
            ("gid_map", format!("0 {} 1", owner.1)),
        ];
        for (file, map) in maps {
            if let Err(e) = std::fs::write(format!("/proc/{pid}/{file}"), map) {
                return Err(fail(os_err(
                    &format!("cannot write the sandbox's {file}"),
                    e,
                )));
            }
        }
        let go = std::fs::File::from(go_write);
        if let Err(e) = std::io::Write::write_all(&mut &go, &[1]) {
            return Err(fail(os_err("cannot start the sandbox's anchor", e)));
        }
        match read_report(&report_read) {
            Ok((0, _)) => {}
            Ok((step, err)) => {
                let what = match step
                    .checked_sub(100)
                    .and_then(|i| plan.steps.get(i as usize))
                {
                    Some(failed) => failed.describe(),
                    None => step_name(step).to_string(),
                };
                return Err(fail(format!(
                    "{what}: {}",
                    std::io::Error::from_raw_os_error(err as i32)
                )));
            }
            Err(why) => return Err(fail(why)),
        }
        drop(plan);
        let anchor = Anchor::joined(pid, spec, limits, owner).map_err(fail)?;
        // The anchor is this process's child: reap it whenever it ends, so it leaves no zombie.
        let _ = std::thread::Builder::new()
            .name("sandbox-anchor-reaper".into())
            .stack_size(64 << 10)
            .spawn(move || unsafe {
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            });
        Ok(anchor)
    }

    /// Takes over the anchor `pid` that an earlier process started for the view `spec`, if it
    /// still runs and started at `start_time` ([`Anchor::start_time`]), so that the sandbox's
    /// processes live on.
    pub fn adopt(pid: i32, start_time: u64, spec: &ViewSpec, limits: Limits) -> Option<Anchor> {
        if process_start_time(pid) != Some(start_time) {
            return None;
        }
        Anchor::joined(pid, spec, limits, owner()).ok()
    }

    /// When the anchor started, in clock ticks since boot (to recognise it later).
    pub fn start_time(&self) -> Option<u64> {
        process_start_time(self.pid)
    }

    /// The anchor `pid`, ready: its namespaces opened, its Landlock rules made.
    fn joined(
        pid: i32,
        spec: &ViewSpec,
        limits: Limits,
        owner: (u32, u32),
    ) -> Result<Anchor, String> {
        let mut kinds = vec![
            ("user", libc::CLONE_NEWUSER),
            ("mnt", libc::CLONE_NEWNS),
            ("ipc", libc::CLONE_NEWIPC),
            ("uts", libc::CLONE_NEWUTS),
        ];
        if spec.network_off {
            kinds.push(("net", libc::CLONE_NEWNET));
        }
        kinds.push(("pid", libc::CLONE_NEWPID));
        let mut namespaces = Vec::new();
        for (name, kind) in kinds {
            match std::fs::File::open(format!("/proc/{pid}/ns/{name}")) {
                Ok(file) => namespaces.push((OwnedFd::from(file), kind)),
                Err(e) => return Err(os_err(&format!("cannot open the {name} namespace"), e)),
            }
        }
        let mut layers = Layers {
            namespaces: true,
            filesystem_view: true,
            network_off: spec.network_off,
            no_new_privs: true,
            seccomp: true,
            landlock_abi: None,
            limits: true,
            missing: Vec::new(),
        };
        let landlock = match landlock_abi() {
            Some(abi) => match landlock_ruleset(pid, abi, &spec.home) {
                Ok(fd) => {
                    layers.landlock_abi = Some(abi);
                    Some((fd, abi))
                }
                Err(e) => {
                    layers.missing.push(format!("landlock ({e})"));
                    None
                }
            },
            None => {
                layers
                    .missing
                    .push("landlock (not offered by this kernel)".into());
                None
            }
        };
        // SAFETY: a plain system call; the descriptor it returns is owned here.
        let pidfd = unsafe {
            let fd = libc::syscall(libc::SYS_pidfd_open, pid, 0u32);
            (fd >= 0).then(|| OwnedFd::from_raw_fd(fd as RawFd))
        };
        Ok(Anchor {
            pid,
            pidfd,
            namespaces,
            landlock,
            filter: seccomp_filter(),
            limits,
            layers,
            owner,
        })
    }

    /// The layers in force.
    pub fn layers(&self) -> &Layers {
        &self.layers
    }

    /// The anchor's host pid (PID 1 of the sandbox).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Host pids of every process in the sandbox's PID namespace but the anchor.
    pub fn members(&self) -> Vec<i32> {
        let Ok(ours) = std::fs::read_link(format!("/proc/{}/ns/pid", self.pid)) else {
            return Vec::new();
        };
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| *pid != self.pid)
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/ns/pid"))
                    .ok()
                    .as_ref()
                    == Some(&ours)
            })
            .collect()
    }

    /// Ends the anchor, and with it every process of the sandbox.
    pub fn kill(&self) {
        // SAFETY: plain system calls on a pidfd owned here or a pid checked just before.
        unsafe {
            match &self.pidfd {
                Some(fd) => {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        fd.as_raw_fd(),
                        libc::SIGKILL,
                        std::ptr::null::<libc::siginfo_t>(),
                        0u32,
                    );
                }
                None => {
                    libc::kill(self.pid, libc::SIGKILL);
                }
            }
        }
    }

    /// Makes `cmd` run confined: joining the namespaces, its cwd `cwd` inside, limits,
    /// no_new_privs and no capabilities, Landlock and seccomp, then one more fork into the PID
    /// namespace. `cwd` is an absolute path inside the view.
    pub fn confine(
        self: &std::sync::Arc<Self>,
        cmd: &mut std::process::Command,
        cwd: &str,
    ) -> std::io::Result<()> {
        use std::os::unix::process::CommandExt;
        let cwd = CString::new(cwd).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "a NUL in the cwd")
        })?;
        let anchor = self.clone();
        // SAFETY: the closure runs in the forked child and makes only system calls on data
        // prepared here.
        unsafe {
            cmd.pre_exec(move || anchor.enter(&cwd));
        }
        Ok(())
    }

    /// In the forked child: everything [`Anchor::confine`] lists.
    fn enter(&self, cwd: &CString) -> std::io::Result<()> {
        let fail = || Err(std::io::Error::last_os_error());
        unsafe {
            for (fd, kind) in &self.namespaces {
                if libc::setns(fd.as_raw_fd(), *kind) != 0 {
                    return fail();
                }
                if *kind == libc::CLONE_NEWUSER
                    && (libc::setresgid(0, 0, 0) != 0 || libc::setresuid(0, 0, 0) != 0)
                {
                    return fail();
                }
            }
            if libc::chdir(cwd.as_ptr()) != 0 {
                return fail();
            }
            for (resource, value) in [
                (libc::RLIMIT_NPROC, self.limits.processes),
                (libc::RLIMIT_FSIZE, self.limits.file_size),
                (libc::RLIMIT_NOFILE, self.limits.open_files),
                (libc::RLIMIT_CORE, 0),
            ] {
                let limit = libc::rlimit {
                    rlim_cur: value,
                    rlim_max: value,
                };
                if libc::setrlimit(resource, &limit) != 0 {
                    return fail();
                }
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return fail();
            }
            for cap in 0..64 {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno() != libc::EINVAL
                {
                    return fail();
                }
            }
            if let Some((fd, _)) = &self.landlock
                && libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) != 0
            {
                return fail();
            }
            let header = CapHeader {
                version: 0x2008_0522,
                pid: 0,
            };
            let data = [CapData::default(); 2];
            if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
                return fail();
            }
            let prog = libc::sock_fprog {
                len: self.filter.len() as u16,
                filter: self.filter.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const _ as libc::c_ulong,
                0,
                0,
            ) != 0
            {
                return fail();
            }
            match libc::fork() {
                -1 => fail(),
                0 => Ok(()),
                child => wait_and_mirror(child),
            }
        }
    }
}

/// Field 22 of `/proc/<pid>/stat`: when the process started, in clock ticks since boot.
fn process_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    after_name.split(' ').nth(19)?.parse().ok()
}

/// Who root inside a sandbox is outside: the caller, or [`SANDBOX_UID`] when that is root.
fn owner() -> (u32, u32) {
    // SAFETY: plain system calls without arguments.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if euid == 0 {
        (SANDBOX_UID, SANDBOX_UID)
    } else {
        (euid, egid)
    }
}

/// In the parent left outside the PID namespace: waits for the command and ends as it did.
unsafe fn wait_and_mirror(child: libc::pid_t) -> ! {
    unsafe {
        // Nothing of this process is needed any more; the command keeps its own descriptors
        // (and std's exec-error pipe, so spawn returns once the command has started).
        libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
        let mut status = 0;
        loop {
            let r = libc::waitpid(child, &mut status, 0);
            if r == child {
                break;
            }
            if r < 0 && errno() != libc::EINTR {
                libc::_exit(127);
            }
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        let sig = libc::WTERMSIG(status);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig);
    }
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made and are owned here.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The anchor's report: `(step, errno)`, `(0, 0)` when ready.
fn read_report(fd: &OwnedFd) -> Result<(u32, u32), String> {
    let mut poll = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = ANCHOR_START.as_millis() as i32;
    if unsafe { libc::poll(&mut poll, 1, ms) } <= 0 {
        return Err(format!(
            "the sandbox's anchor did not build its view within {} s",
            ANCHOR_START.as_secs()
        ));
    }
    let mut buf = [0u8; 8];
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
    if n != 8 {
        return Err("the sandbox's anchor ended before it built its view".into());
    }
    let step = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes"));
    let err = u32::from_le_bytes(buf[4..].try_into().expect("4 bytes"));
    Ok((step, err))
}

// Landlock (include/uapi/linux/landlock.h).
const LL_EXECUTE: u64 = 1 << 0;
const LL_READ_FILE: u64 = 1 << 2;
const LL_READ_DIR: u64 = 1 << 3;
const LL_SCOPE_ABSTRACT_UNIX: u64 = 1 << 0;
const LL_SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneath {
    allowed_access: u64,
    parent_fd: i32,
}

/// Every filesystem right ABI `abi` knows.
fn landlock_fs_rights(abi: u32) -> u64 {
    let mut all = (1 << 13) - 1; // ABI 1: execute .. make_sym
    if abi >= 2 {
        all |= 1 << 13; // refer
    }
    if abi >= 3 {
        all |= 1 << 14; // truncate
    }
    if abi >= 5 {
        all |= 1 << 15; // ioctl_dev
    }
    all
}

/// A ruleset for the anchor's view: read and execute everywhere in it, every right under home,
/// `/tmp` and `/dev`; with ABI 6, no signals or abstract unix sockets outside the sandbox.
fn landlock_ruleset(anchor: i32, abi: u32, home: &str) -> Result<OwnedFd, String> {
    let all = landlock_fs_rights(abi);
    let attr = RulesetAttr {
        handled_access_fs: all,
        handled_access_net: 0,
        scoped: if abi >= 6 {
            LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL
        } else {
            0
        },
    };
    let size = if abi >= 6 { 24 } else { 8 };
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            size as usize,
            0u32,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    // SAFETY: a descriptor just made and owned here.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let read = LL_EXECUTE | LL_READ_FILE | LL_READ_DIR;
    let view = format!("/proc/{anchor}/root");
    for (path, access) in [
        (view.clone(), read),
        (format!("{view}{home}"), all),
        (format!("{view}/tmp"), all),
        (format!("{view}/dev"), all & !(1 << 6 | 1 << 11)), // no char or block devices made
        (format!("{view}/dev/shm"), all),
    ] {
        let dir = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        let rule = PathBeneath {
            allowed_access: access,
            parent_fd: dir.as_raw_fd(),
        };
        let r = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset.as_raw_fd(),
                1u32,
                &rule as *const PathBeneath,
                0u32,
            )
        };
        if r != 0 {
            return Err(format!("{path}: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(ruleset)
}

// seccomp (include/uapi/linux/seccomp.h, filter.h).
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

/// Calls a sandbox has no use for: they fail with `EPERM`.
const DENIED: &[libc::c_long] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_kcmp,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_syslog,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_userfaultfd,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
];

/// Namespace flags `clone` may not take.
const NEW_NAMESPACES: u32 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWCGROUP) as u32;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The seccomp filter: another architecture is killed, [`DENIED`] calls and `clone` with new
/// namespaces fail with `EPERM`, `clone3` with `ENOSYS` (its flags cannot be inspected; libc
/// falls back to `clone`).
fn seccomp_filter() -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const JGE: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
    const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let eperm = RET_ERRNO | libc::EPERM as u32;
    let enosys = RET_ERRNO | libc::ENOSYS as u32;
    let mut f = vec![
        stmt(LD_W_ABS, 4),
        jump(JEQ, AUDIT_ARCH, 1, 0),
        stmt(RET, RET_KILL_PROCESS),
        stmt(LD_W_ABS, 0),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        // x32 calls (bit 30) would pass under other numbers.
        f.push(jump(JGE, 0x4000_0000, 0, 1));
        f.push(stmt(RET, eperm));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = JGE;
    // Layout after the checks: DENIED jumps, clone3, clone, allow, enosys, flags check, deny.
    let n = DENIED.len();
    for (i, nr) in DENIED.iter().enumerate() {
        // To `deny`: past the rest of the jumps (n - i - 1), clone3, clone, allow, enosys, and
        // the three instructions of the flags check.
        let to_deny = (n - i - 1) + 2 + 1 + 1 + 3;
        f.push(jump(JEQ, *nr as u32, to_deny as u8, 0));
    }
    f.push(jump(JEQ, libc::SYS_clone3 as u32, 2, 0)); // to enosys
    f.push(jump(JEQ, libc::SYS_clone as u32, 2, 0)); // to the flags check
    f.push(stmt(RET, RET_ALLOW));
    f.push(stmt(RET, enosys));
    // clone's flags: its first argument on x86_64 and aarch64 (low 32 bits at offset 16).
    f.push(stmt(LD_W_ABS, 16));
    f.push(jump(JSET, NEW_NAMESPACES, 1, 0));
    f.push(stmt(RET, RET_ALLOW));
    f.push(stmt(RET, eperm));
    debug_assert!(f.len() < 256);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_jumps_land_on_its_returns() {
        let f = seccomp_filter();
        let deny = f.len() - 1;
        let start = f.iter().position(|i| i.k == DENIED[0] as u32).unwrap();
        for (i, insn) in f.iter().enumerate().skip(start).take(DENIED.len()) {
            assert_eq!(i + 1 + insn.jt as usize, deny, "jump {i}");
        }
        assert_eq!(f[deny].k, RET_ERRNO | libc::EPERM as u32);
    }
}
