//! File operations of a local sandbox, confined to its working directory.
//!
//! Every primitive resolves its path beneath the sandbox's working directory (the [`Root`], held
//! open from create on), one component at a time, relative to a directory already open: each
//! component is looked at without following it (`fstatat(AT_SYMLINK_NOFOLLOW)`) and opened with
//! `O_NOFOLLOW`, and a symbolic link is read (`readlinkat`) and its target walked the same way,
//! from where the link is (a relative target) or from the root (an absolute target naming the
//! working directory). Whatever would leave the directory is refused with `Validation` naming
//! the path: `..` above it (by text, or once links are resolved), an absolute path elsewhere,
//! a link whose target is outside it. No path is handed to the system whole, so a link planted
//! in the directory is never followed out of it, even one that appears between two steps.
//!
//! What this does not cover: a process of the sandbox that *moves* a directory the walk has
//! already opened to somewhere outside the root, at that very moment, takes the rest of the
//! walk with it. Such a process can read and write anything of the user's by itself anyway;
//! commands are not confined (see the [module docs](super)).

use crate::error::{Error, ErrorKind, Result};
use crate::files::{ByteStream, FileInfo, FileKind};
use futures::{StreamExt, TryStreamExt};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio_util::io::ReaderStream;

/// Chunk size for downloads.
const CHUNK: usize = 64 * 1024;

/// Turns an IO error about `path` into an [`Error`] whose message names the path.
pub(crate) fn io_error(e: std::io::Error, what: &str, path: &str) -> Error {
    let message = match e.kind() {
        std::io::ErrorKind::NotFound => format!("{what} {path}: no such file or directory"),
        _ => format!("{what} {path}: {e}"),
    };
    let kind = match e.kind() {
        std::io::ErrorKind::IsADirectory | std::io::ErrorKind::NotADirectory => {
            ErrorKind::Validation
        }
        std::io::ErrorKind::DirectoryNotEmpty => ErrorKind::Conflict,
        other => Error::from(std::io::Error::from(other)).kind(),
    };
    Error::new(kind, message).with_source(e)
}

/// Checks that `root` is fit to hold sandboxes of user `me`: a directory owned by `me` that its
/// group and others cannot write to, reached (if `root` is a symbolic link) through a link `me`
/// owns. Whoever else could write there could plant a sandbox's working directory.
pub(crate) fn check_root(root: &Path, me: u32) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let shown = root.display();
    let refuse = |problem: String| {
        Err(Error::validation(format!(
            "refusing to use {shown} as the local sandbox root: {problem}"
        )))
    };
    let link = std::fs::symlink_metadata(root)
        .map_err(|e| io_error(e, "cannot inspect sandbox root", &shown.to_string()))?;
    if link.file_type().is_symlink() && link.uid() != me {
        return refuse(format!(
            "it is a symbolic link owned by uid {}, not by the current user (uid {me})",
            link.uid()
        ));
    }
    let meta = std::fs::metadata(root)
        .map_err(|e| io_error(e, "cannot inspect sandbox root", &shown.to_string()))?;
    if !meta.is_dir() {
        return refuse("it is not a directory".to_owned());
    }
    if meta.uid() != me {
        return refuse(format!(
            "it is owned by uid {}, not by the current user (uid {me}); use a directory you own",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return refuse(format!(
            "it is writable by its group or by others (mode {:o}); make it private (chmod \
             go-w) or use another directory",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// How many symbolic links one path may go through (as Linux's `MAXSYMLINKS`).
const MAX_LINKS: u32 = 40;

/// A sandbox's working directory, held open: every file primitive resolves beneath it (or,
/// for a confined sandbox, beneath the directory its view shows at the path's prefix).
#[derive(Debug)]
pub(crate) struct Root {
    fd: OwnedFd,
    /// The directory's path as made (`<root>/<id>/work`).
    path: PathBuf,
    /// Its canonical path (what `pwd` prints in it).
    canonical: PathBuf,
    /// A confined sandbox's view: where its commands see the work directory (its home), and
    /// the directory they see at `/tmp`, held open.
    view: Option<(PathBuf, OwnedFd)>,
    /// Who owns what the file primitives make (a confined sandbox's root user, when the
    /// caller is root), so the sandbox can change it.
    owner: Option<(u32, u32)>,
}

/// Which held-open directory a path resolves beneath.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Base {
    Work,
    Tmp,
}

impl Root {
    /// Opens the working directory at `path`, which must be a directory and not a link.
    pub(crate) fn open(path: &Path) -> std::io::Result<Root> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let canonical = std::fs::canonicalize(path)?;
        Ok(Root {
            fd,
            path: path.to_owned(),
            canonical,
            view: None,
            owner: None,
        })
    }

    /// Resolves absolute paths as a confined sandbox's commands see them: `home` (e.g.
    /// `/home/user`) is the work directory and `/tmp` the directory `tmp`; what the file
    /// primitives make is handed to `owner` when set.
    pub(crate) fn with_view(
        mut self,
        home: &Path,
        tmp: &Path,
        owner: Option<(u32, u32)>,
    ) -> std::io::Result<Root> {
        let fd = nix::fcntl::open(
            tmp,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        self.view = Some((home.to_owned(), fd));
        self.owner = owner;
        Ok(self)
    }

    /// The base and the relative rest of an absolute path under a held-open directory: the
    /// work directory as made or canonical, or, in a view, its home or `/tmp`.
    fn inside<'a>(&self, absolute: &'a Path) -> Option<(Base, &'a Path)> {
        if let Ok(rest) = absolute
            .strip_prefix(&self.path)
            .or_else(|_| absolute.strip_prefix(&self.canonical))
        {
            return Some((Base::Work, rest));
        }
        let (home, _) = self.view.as_ref()?;
        if let Ok(rest) = absolute.strip_prefix(home) {
            return Some((Base::Work, rest));
        }
        absolute
            .strip_prefix("/tmp")
            .ok()
            .map(|rest| (Base::Tmp, rest))
    }

    fn base_fd(&self, base: Base) -> std::io::Result<OwnedFd> {
        match (base, &self.view) {
            (Base::Tmp, Some((_, tmp))) => tmp.try_clone(),
            _ => self.fd.try_clone(),
        }
    }

    /// Hands a new entry to the sandbox's owner (nothing without one).
    fn own(&self, dir: &OwnedFd, name: &OsStr) -> Result<()> {
        let Some((uid, gid)) = self.owner else {
            return Ok(());
        };
        nix::unistd::fchownat(
            dir,
            name,
            Some(uid.into()),
            Some(gid.into()),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(|e| io_error(e.into(), "cannot hand over", &name.to_string_lossy()))
    }
}

/// A step of a walk.
enum Part {
    Name(OsString),
    Up,
}

/// The steps of a relative path (`.` dropped; a trailing slash or `/.` names the same entry).
fn parts(path: &Path) -> VecDeque<Part> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(Part::Name(name.to_owned())),
            Component::ParentDir => Some(Part::Up),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// What a path names, once resolved beneath the root.
pub(crate) enum Place {
    /// The working directory itself (an open descriptor of it).
    Root(OwnedFd),
    /// The entry `name` of the open directory `dir` (which may not exist yet).
    Entry { dir: OwnedFd, name: OsString },
}

/// How to resolve a path.
#[derive(Clone, Copy)]
struct Walk {
    /// Follow a link in the last component (reads, writes, listings); otherwise the last
    /// component is the entry itself (stat, remove, rename).
    follow_last: bool,
    /// Create missing directories on the way (writes, mkdir, a rename's destination).
    make_parents: bool,
}

const FOLLOW: Walk = Walk {
    follow_last: true,
    make_parents: false,
};
const NO_FOLLOW: Walk = Walk {
    follow_last: false,
    make_parents: false,
};
const FOLLOW_MAKING: Walk = Walk {
    follow_last: true,
    make_parents: true,
};
const NO_FOLLOW_MAKING: Walk = Walk {
    follow_last: false,
    make_parents: true,
};

/// The refusal of a path that leads outside the sandbox's directory.
fn outside(what: &str, shown: &str, why: &str) -> Error {
    Error::validation(format!(
        "{what} {shown}: the path leads outside the sandbox's working directory ({why}); file \
         operations of a local sandbox stay inside it"
    ))
}

/// Resolves `shown` (a sandbox path: relative to the root, or absolute under it) beneath
/// `root`. Errors name `shown` after `what` ("cannot open", ...).
fn resolve(root: &Root, shown: &str, walk: Walk, what: &str) -> Result<Place> {
    let io = |e: Errno| io_error(e.into(), what, shown);
    let path = Path::new(shown);
    let mut base = Base::Work;
    let mut todo = if path.is_absolute() {
        match root.inside(path) {
            Some((at, rest)) => {
                base = at;
                parts(rest)
            }
            None => {
                return Err(outside(
                    what,
                    shown,
                    &format!(
                        "an absolute path that is not under {}",
                        root.canonical.display()
                    ),
                ));
            }
        }
    } else {
        parts(path)
    };
    // By text first: `..` above the root is refused wherever the links would lead.
    let mut depth = 0usize;
    for part in &todo {
        match part {
            Part::Name(_) => depth += 1,
            Part::Up if depth == 0 => {
                return Err(outside(what, shown, "`..` climbs above it"));
            }
            Part::Up => depth -= 1,
        }
    }
    // The directories walked into, from the root down, each with its name in the one above.
    let mut stack: Vec<(OwnedFd, Option<OsString>)> = vec![(
        root.base_fd(base).map_err(|e| io_error(e, what, shown))?,
        None,
    )];
    let mut links = 0;
    while let Some(part) = todo.pop_front() {
        let name = match part {
            Part::Up if stack.len() == 1 => {
                return Err(outside(
                    what,
                    shown,
                    "a symbolic link on the way leads above it",
                ));
            }
            Part::Up => {
                stack.pop();
                continue;
            }
            Part::Name(name) => name,
        };
        let last = todo.is_empty();
        if last && !walk.follow_last {
            let (dir, _) = stack.pop().unwrap_or_else(|| unreachable!());
            return Ok(Place::Entry { dir, name });
        }
        let Some((top, _)) = stack.last() else {
            unreachable!("the root is never popped")
        };
        match nix::sys::stat::fstatat(top, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) if kind_of(&stat) == FileKind::Symlink => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(io(Errno::ELOOP));
                }
                let target = nix::fcntl::readlinkat(top, name.as_os_str()).map_err(io)?;
                let target = Path::new(&target);
                let mut next = if target.is_absolute() {
                    let Some((at, rest)) = root.inside(target) else {
                        return Err(outside(
                            what,
                            shown,
                            &format!("through a symbolic link to {}", target.display()),
                        ));
                    };
                    if at != base {
                        base = at;
                        stack = vec![(
                            root.base_fd(base).map_err(|e| io_error(e, what, shown))?,
                            None,
                        )];
                    }
                    stack.truncate(1);
                    parts(rest)
                } else {
                    parts(target)
                };
                next.extend(todo);
                todo = next;
            }
            Ok(stat) if !last && kind_of(&stat) == FileKind::Dir => {
                let fd = nix::fcntl::openat(
                    top,
                    name.as_os_str(),
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(io)?;
                stack.push((fd, Some(name)));
            }
            Ok(_) if !last => return Err(io(Errno::ENOTDIR)),
            Err(Errno::ENOENT) if !last && walk.make_parents => {
                match nix::sys::stat::mkdirat(
                    top,
                    name.as_os_str(),
                    Mode::from_bits_truncate(0o777),
                ) {
                    Ok(()) => {
                        root.own(top, &name)?;
                        todo.push_front(Part::Name(name));
                    }
                    Err(Errno::EEXIST) => todo.push_front(Part::Name(name)),
                    Err(e) => {
                        return Err(io_error(
                            e.into(),
                            "cannot create the parent directories of",
                            shown,
                        ));
                    }
                }
            }
            Ok(_) | Err(Errno::ENOENT) if last => {
                let (dir, _) = stack.pop().unwrap_or_else(|| unreachable!());
                return Ok(Place::Entry { dir, name });
            }
            Ok(_) => unreachable!("every case of a component before the last is handled above"),
            Err(e) => return Err(io(e)),
        }
    }
    // The path ends in a directory on the stack (`.`, `a/..`, a link to a directory).
    let (fd, name) = stack.pop().unwrap_or_else(|| unreachable!());
    match (name, stack.pop()) {
        (Some(name), Some((dir, _))) => Ok(Place::Entry { dir, name }),
        _ => Ok(Place::Root(fd)),
    }
}

/// Runs blocking file work off the async runtime.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::new(ErrorKind::Provider, format!("file task failed: {e}")))?
}

/// Opens (creating or truncating) the file `shown` names for writing, creating its parents.
fn create(root: &Root, shown: &str) -> Result<std::fs::File> {
    let Place::Entry { dir, name } = resolve(root, shown, FOLLOW_MAKING, "cannot create")? else {
        return Err(Error::validation(format!(
            "cannot create {shown}: it is the sandbox's working directory"
        )));
    };
    let fd = nix::fcntl::openat(
        &dir,
        name.as_os_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o666),
    )
    .map_err(|e| io_error(e.into(), "cannot create", shown))?;
    root.own(&dir, &name)?;
    Ok(std::fs::File::from(fd))
}

/// Writes everything `body` yields to the file `shown` names, creating parents and replacing
/// any file there. The copy goes through a fixed-size buffer, so memory stays constant.
pub(crate) async fn write_from(
    root: &Arc<Root>,
    shown: &str,
    body: impl AsyncRead + Unpin,
) -> Result<u64> {
    let file = {
        let (root, path) = (root.clone(), shown.to_owned());
        blocking(move || create(&root, &path)).await?
    };
    let mut file = tokio::fs::File::from_std(file);
    // One 1 MiB buffer (constant memory): `tokio::io::copy`'s 8 KiB buffer costs a blocking-pool
    // round trip per 8 KiB and made uploads 4.5x slower than a plain copy (see BENCHMARKS.md).
    let mut body = tokio::io::BufReader::with_capacity(1 << 20, body);
    let written = tokio::io::copy_buf(&mut body, &mut file)
        .await
        .map_err(|e| io_error(e, "cannot write", shown))?;
    file.flush()
        .await
        .map_err(|e| io_error(e, "cannot write", shown))?;
    Ok(written)
}

/// Opens the regular file `shown` names for reading.
fn open_file(root: &Root, shown: &str) -> Result<std::fs::File> {
    let is_dir = || Error::validation(format!("cannot download {shown}: it is a directory"));
    let Place::Entry { dir, name } = resolve(root, shown, FOLLOW, "cannot open")? else {
        return Err(is_dir());
    };
    // Non-blocking, so a FIFO planted here cannot hang the open; refused just below.
    let fd = nix::fcntl::openat(
        &dir,
        name.as_os_str(),
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        Mode::empty(),
    )
    .map_err(|e| io_error(e.into(), "cannot open", shown))?;
    let file = std::fs::File::from(fd);
    let meta = file
        .metadata()
        .map_err(|e| io_error(e, "cannot stat", shown))?;
    if meta.is_dir() {
        return Err(is_dir());
    }
    if !meta.is_file() {
        return Err(Error::validation(format!(
            "cannot download {shown}: it is not a regular file"
        )));
    }
    Ok(file)
}

/// Opens the file `shown` names for a lazy, chunked download.
pub(crate) async fn download(root: &Arc<Root>, shown: &str) -> Result<ByteStream> {
    let file = {
        let (root, path) = (root.clone(), shown.to_owned());
        blocking(move || open_file(&root, &path)).await?
    };
    let shown = shown.to_owned();
    Ok(
        ReaderStream::with_capacity(tokio::fs::File::from_std(file), CHUNK)
            .map_err(move |e| io_error(e, "cannot read", &shown))
            .boxed(),
    )
}

fn kind_of(stat: &FileStat) -> FileKind {
    let format = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    if format == SFlag::S_IFLNK {
        FileKind::Symlink
    } else if format == SFlag::S_IFDIR {
        FileKind::Dir
    } else if format == SFlag::S_IFREG {
        FileKind::File
    } else {
        FileKind::Other
    }
}

/// The permission bits of a stat (`mode_t` is `u32` on Linux, `u16` on macOS).
#[allow(clippy::useless_conversion)]
fn permissions(stat: &FileStat) -> u32 {
    u32::from(stat.st_mode) & 0o7777
}

fn info(path: String, name: String, stat: &FileStat) -> FileInfo {
    let modified = match (
        u64::try_from(stat.st_mtime),
        u32::try_from(stat.st_mtime_nsec),
    ) {
        (Ok(secs), Ok(nanos)) => SystemTime::UNIX_EPOCH.checked_add(Duration::new(secs, nanos)),
        _ => None,
    };
    FileInfo {
        path,
        name,
        kind: kind_of(stat),
        size: u64::try_from(stat.st_size).unwrap_or(0),
        mode: Some(permissions(stat)),
        modified,
    }
}

/// Metadata of what `place` names, without following a link there.
fn stat_place(place: &Place) -> nix::Result<FileStat> {
    match place {
        Place::Root(fd) => nix::sys::stat::fstat(fd),
        Place::Entry { dir, name } => {
            nix::sys::stat::fstatat(dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
        }
    }
}

/// Metadata of the entry `shown` names (a symbolic link is reported as a link).
pub(crate) async fn stat(root: &Arc<Root>, shown: &str) -> Result<FileInfo> {
    let (root, shown) = (root.clone(), shown.to_owned());
    blocking(move || {
        let place = resolve(&root, &shown, NO_FOLLOW, "cannot stat")?;
        let stat = stat_place(&place).map_err(|e| io_error(e.into(), "cannot stat", &shown))?;
        let name = match Path::new(&shown).file_name() {
            Some(n) => n
                .to_str()
                .ok_or_else(|| {
                    Error::validation(format!(
                        "file name {:?} is not valid UTF-8",
                        n.to_string_lossy()
                    ))
                })?
                .to_owned(),
            None => shown.clone(),
        };
        Ok(info(shown, name, &stat))
    })
    .await
}

/// Opens a new descriptor of the directory `place` names (never a shared one: a listing reads
/// through its own offset). A link there is not followed.
fn open_dir(place: &Place) -> nix::Result<OwnedFd> {
    let (dir, name): (&OwnedFd, &OsStr) = match place {
        Place::Root(fd) => (fd, OsStr::new(".")),
        Place::Entry { dir, name } => (dir, name),
    };
    nix::fcntl::openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// The names in an open directory, without `.` and `..`.
fn names(dir: OwnedFd) -> nix::Result<(nix::dir::Dir, Vec<OsString>)> {
    use std::os::unix::ffi::OsStrExt;
    let mut dir = nix::dir::Dir::from_fd(dir)?;
    let mut out = Vec::new();
    for entry in dir.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(OsStr::from_bytes(name).to_owned());
        }
    }
    Ok((dir, out))
}

/// Lists the directory `shown` names down to `depth` levels (1 = its own entries), sorted by
/// path. Entries are named `shown/child/...`; symbolic links are listed but not followed.
pub(crate) async fn list(root: &Arc<Root>, shown: &str, depth: u32) -> Result<Vec<FileInfo>> {
    let (root, shown) = (root.clone(), shown.to_owned());
    blocking(move || list_blocking(&root, &shown, depth)).await
}

fn list_blocking(root: &Root, shown: &str, depth: u32) -> Result<Vec<FileInfo>> {
    let place = resolve(root, shown, FOLLOW, "cannot list")?;
    let top = open_dir(&place).map_err(|e| match e {
        Errno::ENOTDIR | Errno::ELOOP => {
            Error::validation(format!("cannot list {shown}: it is not a directory"))
        }
        e => io_error(e.into(), "cannot list", shown),
    })?;
    let mut out = Vec::new();
    let mut top_shown = shown.trim_end_matches('/').to_owned();
    if top_shown.is_empty() {
        top_shown = "/".to_owned();
    }
    let mut pending: Vec<(OwnedFd, String, u32)> = vec![(top, top_shown, 1)];
    while let Some((fd, dir_shown, level)) = pending.pop() {
        let (dir, entries) =
            names(fd).map_err(|e| io_error(e.into(), "cannot list", &dir_shown))?;
        for raw in entries {
            let Some(name) = raw.to_str() else {
                return Err(Error::validation(format!(
                    "directory {dir_shown} holds an entry whose name is not valid UTF-8: {:?}",
                    raw.to_string_lossy()
                )));
            };
            let child_shown = if dir_shown.ends_with('/') {
                format!("{dir_shown}{name}")
            } else {
                format!("{dir_shown}/{name}")
            };
            let stat = match nix::sys::stat::fstatat(
                dir.as_fd(),
                raw.as_os_str(),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            ) {
                Ok(stat) => stat,
                // Removed since the directory was read.
                Err(Errno::ENOENT) => continue,
                Err(e) => return Err(io_error(e.into(), "cannot stat", &child_shown)),
            };
            if kind_of(&stat) == FileKind::Dir && level < depth {
                let sub = nix::fcntl::openat(
                    dir.as_fd(),
                    raw.as_os_str(),
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| io_error(e.into(), "cannot list", &child_shown))?;
                pending.push((sub, child_shown.clone(), level + 1));
            }
            out.push(info(child_shown, name.to_owned(), &stat));
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Removes a file or a whole tree; a missing path is `NotFound`.
///
/// A symbolic link is removed itself, never what it points to, however the path spells it
/// (`link`, `link/`, `link/.`), and a tree is removed without following the links inside it.
/// The working directory itself is never removed.
pub(crate) async fn remove(root: &Arc<Root>, shown: &str) -> Result<()> {
    let (root, shown) = (root.clone(), shown.to_owned());
    blocking(move || {
        let fail = |e: Errno| io_error(e.into(), "cannot remove", &shown);
        let Place::Entry { dir, name } = resolve(&root, &shown, NO_FOLLOW, "cannot remove")? else {
            return Err(Error::validation(format!(
                "refusing to remove {shown}: it is the sandbox's working directory"
            )));
        };
        let stat = nix::sys::stat::fstatat(&dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(fail)?;
        if kind_of(&stat) == FileKind::Dir {
            remove_tree(dir.as_fd(), &name).map_err(fail)
        } else {
            nix::unistd::unlinkat(
                &dir,
                name.as_os_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            )
            .map_err(fail)
        }
    })
    .await
}

/// Removes the directory `name` of `parent` and everything in it, following no link.
fn remove_tree(parent: BorrowedFd<'_>, name: &OsStr) -> nix::Result<()> {
    let fd = nix::fcntl::openat(
        parent,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let (dir, entries) = names(fd)?;
    for entry in entries {
        let entry = entry.as_os_str();
        let removed =
            match nix::sys::stat::fstatat(dir.as_fd(), entry, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(stat) if kind_of(&stat) == FileKind::Dir => remove_tree(dir.as_fd(), entry),
                Ok(_) => nix::unistd::unlinkat(
                    dir.as_fd(),
                    entry,
                    nix::unistd::UnlinkatFlags::NoRemoveDir,
                ),
                Err(e) => Err(e),
            };
        match removed {
            // Gone already (a dying process of the sandbox may be removing it too).
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(e),
        }
    }
    drop(dir);
    nix::unistd::unlinkat(parent, name, nix::unistd::UnlinkatFlags::RemoveDir)
}

/// Creates a directory and its parents; an existing directory is fine, an existing file is not.
pub(crate) async fn mkdir(root: &Arc<Root>, shown: &str) -> Result<()> {
    let (root, shown) = (root.clone(), shown.to_owned());
    blocking(move || {
        let what = "cannot create directory";
        let Place::Entry { dir, name } = resolve(&root, &shown, FOLLOW_MAKING, what)? else {
            return Ok(());
        };
        match nix::sys::stat::mkdirat(&dir, name.as_os_str(), Mode::from_bits_truncate(0o777)) {
            Ok(()) => root.own(&dir, &name),
            Err(Errno::EEXIST)
                if nix::sys::stat::fstatat(
                    &dir,
                    name.as_os_str(),
                    AtFlags::AT_SYMLINK_NOFOLLOW,
                )
                .is_ok_and(|s| kind_of(&s) == FileKind::Dir) =>
            {
                Ok(())
            }
            Err(e) => Err(io_error(e.into(), what, &shown)),
        }
    })
    .await
}

/// Renames `from` to `to` (a link is moved itself), creating the parents of `to`.
pub(crate) async fn rename(root: &Arc<Root>, from: &str, to: &str) -> Result<()> {
    let (root, from, to) = (root.clone(), from.to_owned(), to.to_owned());
    blocking(move || {
        let what = "cannot rename";
        let Place::Entry {
            dir: from_dir,
            name: from_name,
        } = resolve(&root, &from, NO_FOLLOW, what)?
        else {
            return Err(Error::validation(format!(
                "refusing to rename {from}: it is the sandbox's working directory"
            )));
        };
        nix::sys::stat::fstatat(
            &from_dir,
            from_name.as_os_str(),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(|e| io_error(e.into(), what, &from))?;
        let Place::Entry {
            dir: to_dir,
            name: to_name,
        } = resolve(&root, &to, NO_FOLLOW_MAKING, what)?
        else {
            return Err(Error::validation(format!(
                "cannot rename {from} to {to}: that is the sandbox's working directory"
            )));
        };
        nix::fcntl::renameat(
            &from_dir,
            from_name.as_os_str(),
            &to_dir,
            to_name.as_os_str(),
        )
        .map_err(|e| {
            let e = std::io::Error::from(e);
            let kind = Error::from(std::io::Error::from(e.kind())).kind();
            Error::new(kind, format!("cannot rename {from} to {to}: {e}")).with_source(e)
        })
    })
    .await
}
