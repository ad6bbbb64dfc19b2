//! Where a simulated sandbox's files live on the host, and the one way its file APIs turn a
//! client's path into a host path: [`Disk::resolve`].
//!
//! A client's paths are the sandbox's, never the host's. A sandbox's disk is two host
//! directories private to it: its `local` sandbox's directory (where its commands run),
//! shown at one absolute path (the *mount*: `/home/user` on E2B, `/vercel/sandbox` on Vercel,
//! the working directory on Daytona), and a *root* beside it that holds every other absolute
//! path (`/tmp/x` is `<root>/tmp/x`). Resolving a path:
//! - joins a relative path to its base and normalises it by text, `..` stopping at `/` (as on
//!   any POSIX system: nothing is above the sandbox's `/`);
//! - walks it one component at a time and follows each symbolic link it meets *as the
//!   sandbox would*: a relative target from the link's directory, an absolute target as a path
//!   of the sandbox (a target naming one of the disk's own host directories, as a link made by
//!   a command, which sees host paths, does, is taken as the sandbox path it stands for); more
//!   than [`MAX_LINKS`] links is `ELOOP`;
//! - maps the result onto the mount or the root by text.
//!
//! So every host path it hands out lies under the disk's two directories and has no link in
//! its existing components (the last one too, unless asked for the entry itself). What this
//! does not cover: a command of the sandbox (a host process, not confined: see the crate
//! docs) that swaps a directory for a link between the resolve and the file operation.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// How many symbolic links one path may go through (as Linux's `MAXSYMLINKS`).
pub(crate) const MAX_LINKS: usize = 40;

/// A sandbox's disk: its mount and its root on the host.
#[derive(Clone, Debug)]
pub(crate) struct Disk {
    /// The host directory shown at `mount` (the `local` sandbox's directory).
    work: PathBuf,
    /// Where `work` shows in the sandbox: absolute, normalised.
    mount: String,
    /// The host directory behind every other absolute path (`work` itself for a mount of `/`).
    root: PathBuf,
    /// The canonical forms of `work` and `root`, for link targets written as host paths.
    canonical: (PathBuf, PathBuf),
}

impl Disk {
    /// The disk of a sandbox whose `local` directory `work` shows at `mount`; every other
    /// absolute path lives under `root` beside it (`<work>/../root`, removed with the
    /// sandbox), made now with the mount point and `/tmp` in it.
    pub fn new(work: &Path, mount: &str) -> Disk {
        let mount = sandbox_sdk_core::absolute_path("/", mount);
        let root = if mount == "/" {
            work.to_owned()
        } else {
            work.parent()
                .map(|p| p.join("root"))
                .unwrap_or_else(|| work.join(".root"))
        };
        let disk = Disk {
            canonical: (
                std::fs::canonicalize(work).unwrap_or_else(|_| work.to_owned()),
                std::fs::canonicalize(&root).unwrap_or_else(|_| root.clone()),
            ),
            work: work.to_owned(),
            mount,
            root,
        };
        disk.prepare();
        disk
    }

    /// Makes the root's standing directories (the mount point, `/tmp`); also after the root
    /// was emptied.
    pub fn prepare(&self) {
        if self.mount != "/" {
            let _ = std::fs::create_dir_all(self.root.join(&self.mount[1..]));
            let _ = std::fs::create_dir_all(self.root.join("tmp"));
        }
    }

    /// The host directory shown at the mount.
    pub fn work(&self) -> &Path {
        &self.work
    }

    /// The host directory behind every absolute path outside the mount.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the mount shows in the sandbox.
    pub fn mount(&self) -> &str {
        &self.mount
    }

    /// `path` (relative to `base`, itself absolute) as the sandbox shows it, normalised, and
    /// the host path behind it with every link on the way followed, the last one too.
    pub fn resolve(&self, base: &str, path: &str) -> (String, std::io::Result<PathBuf>) {
        self.walk(base, path, true)
    }

    /// Like [`Disk::resolve`], but a link in the last component is the entry itself (to stat,
    /// remove or rename a link, never what it names).
    pub fn entry(&self, base: &str, path: &str) -> (String, std::io::Result<PathBuf>) {
        self.walk(base, path, false)
    }

    /// The sandbox path of a host path under the disk (as handed out by [`Disk::resolve`],
    /// or found by listing a directory it handed out).
    pub fn shown(&self, host: &Path) -> Option<String> {
        let under = |dir: &Path, canonical: &Path| {
            host.strip_prefix(dir)
                .or_else(|_| host.strip_prefix(canonical))
                .ok()
                .map(|rest| rest.to_string_lossy().into_owned())
        };
        let (in_mount, in_root) = (
            under(&self.work, &self.canonical.0),
            under(&self.root, &self.canonical.1),
        );
        let (base, rest) = match (in_mount, in_root) {
            (Some(rest), _) => (self.mount.as_str(), rest),
            (None, Some(rest)) => ("/", rest),
            (None, None) => return None,
        };
        Some(sandbox_sdk_core::absolute_path(base, &rest))
    }

    /// Whether a link at sandbox path `link` to `target`, followed by the host from where the
    /// link lies, lands where the sandbox follows it: `target` is relative, never climbs
    /// above the tree the link is in (the mount, or the root outside it) and never steps into
    /// the other one. Any other link stays inside the disk only as the file API sees it; the
    /// host (and every command) would follow it somewhere else.
    pub fn link_stays_in_its_tree(&self, link: &str, target: &str) -> bool {
        if target.starts_with('/') {
            return false;
        }
        let in_mount = |at: &[String]| {
            let path = format!("/{}", at.join("/"));
            self.mount != "/" && self.host(&path).starts_with(&self.work)
        };
        let mut at: Vec<String> = parts(&sandbox_sdk_core::absolute_path(link, "..")).into();
        let side = in_mount(&at);
        let top = if side { parts(&self.mount).len() } else { 0 };
        for part in parts(target) {
            if part == ".." {
                if at.len() <= top {
                    return false;
                }
                at.pop();
            } else {
                at.push(part);
            }
            if in_mount(&at) != side {
                return false;
            }
        }
        true
    }

    /// The host path of a normalised sandbox path, by text.
    fn host(&self, shown: &str) -> PathBuf {
        let in_mount = match shown.strip_prefix(self.mount.trim_end_matches('/')) {
            Some("") => Some(""),
            Some(rest) if rest.starts_with('/') => Some(&rest[1..]),
            _ => None,
        };
        match in_mount {
            Some("") => self.work.clone(),
            Some(rest) => self.work.join(rest),
            None => self.root.join(&shown[1..]),
        }
    }

    fn walk(
        &self,
        base: &str,
        path: &str,
        follow_last: bool,
    ) -> (String, std::io::Result<PathBuf>) {
        let shown = sandbox_sdk_core::absolute_path(base, path);
        let mut todo = parts(&shown);
        let mut done: Vec<String> = Vec::new();
        let mut links = 0;
        while let Some(part) = todo.pop_front() {
            if part == ".." {
                done.pop();
                continue;
            }
            done.push(part);
            if todo.is_empty() && !follow_last {
                break;
            }
            let here = self.host(&format!("/{}", done.join("/")));
            let Ok(target) = std::fs::read_link(&here) else {
                continue;
            };
            links += 1;
            if links > MAX_LINKS {
                return (shown, Err(std::io::Error::from(nix::errno::Errno::ELOOP)));
            }
            done.pop();
            let target = if target.is_absolute() {
                done.clear();
                self.shown(&target)
                    .unwrap_or_else(|| target.to_string_lossy().into_owned())
            } else {
                target.to_string_lossy().into_owned()
            };
            let mut next = parts(&target);
            next.extend(todo);
            todo = next;
        }
        let host = self.host(&format!("/{}", done.join("/")));
        (shown, Ok(host))
    }
}

/// The components of a path, `.` and empty ones dropped, `..` kept.
fn parts(path: &str) -> VecDeque<String> {
    path.split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A disk in a fresh directory, its mount at `/home/user`, and a host directory outside
    /// it holding a file.
    fn disk() -> (tempfile::TempDir, Disk, tempfile::TempDir) {
        let base = tempfile::tempdir().unwrap();
        let work = base.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let disk = Disk::new(&work, "/home/user");
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"host").unwrap();
        (base, disk, outside)
    }

    fn host(disk: &Disk, path: &str) -> PathBuf {
        disk.resolve("/home/user", path).1.unwrap()
    }

    #[test]
    fn paths_map_onto_the_mount_or_the_root_and_dot_dot_stops_at_the_top() {
        let (_base, disk, outside) = disk();
        assert_eq!(host(&disk, "a/b"), disk.work().join("a/b"));
        assert_eq!(host(&disk, "/home/user"), disk.work());
        assert_eq!(
            host(&disk, "/home/username"),
            disk.root().join("home/username")
        );
        assert_eq!(host(&disk, "/tmp/x"), disk.root().join("tmp/x"));
        assert_eq!(
            host(&disk, "../../../../etc/passwd"),
            disk.root().join("etc/passwd")
        );
        assert_eq!(host(&disk, "/"), disk.root());
        let o = outside.path().to_string_lossy();
        assert_eq!(host(&disk, &o), disk.root().join(&o[1..]));
        assert!(disk.root().join("tmp").is_dir() && disk.root().join("home/user").is_dir());
        assert_eq!(
            disk.shown(&disk.work().join("a")).as_deref(),
            Some("/home/user/a")
        );
        assert_eq!(
            disk.shown(&disk.root().join("tmp/x")).as_deref(),
            Some("/tmp/x")
        );
        assert_eq!(disk.shown(outside.path()), None);
    }

    #[test]
    fn links_resolve_as_the_sandbox_sees_them_never_onto_the_host() {
        let (_base, disk, outside) = disk();
        let work = disk.work();
        symlink(outside.path(), work.join("abs")).unwrap();
        let up = "../".repeat(work.components().count() + 2);
        symlink(
            format!("{up}{}", outside.path().display()),
            work.join("rel"),
        )
        .unwrap();
        symlink("/tmp", work.join("tmp")).unwrap();
        symlink(work.join("real"), work.join("hostpath")).unwrap();
        symlink("loop", work.join("loop")).unwrap();
        let o = &outside.path().to_string_lossy()[1..];
        assert_eq!(
            host(&disk, "abs/secret"),
            disk.root().join(o).join("secret")
        );
        assert_eq!(
            host(&disk, "rel/secret"),
            disk.root().join(o).join("secret")
        );
        assert_eq!(host(&disk, "tmp/x"), disk.root().join("tmp/x"));
        assert_eq!(host(&disk, "hostpath/x"), work.join("real/x"));
        let (shown, looped) = disk.resolve("/home/user", "loop/x");
        assert_eq!(shown, "/home/user/loop/x");
        assert_eq!(
            looped.unwrap_err().raw_os_error(),
            Some(nix::errno::Errno::ELOOP as i32)
        );
        // The entry itself, when asked for it.
        assert_eq!(disk.entry("/home/user", "abs").1.unwrap(), work.join("abs"));
        assert_eq!(host(&disk, "abs"), disk.root().join(o));
    }

    #[test]
    fn a_link_stays_in_its_tree_only_when_the_host_follows_it_as_the_sandbox_does() {
        let (_base, disk, _outside) = disk();
        for (link, target, stays) in [
            ("/home/user/a", "b", true),
            ("/home/user/d/a", "../b", true),
            ("/home/user/a", "../x", false),
            ("/home/user/a", "/home/user/b", false),
            ("/tmp/a", "../etc/passwd", true),
            ("/tmp/a", "../../../x", false),
            ("/tmp/a", "../home/user/x", false),
            ("/home/a", "user/x", false),
        ] {
            assert_eq!(
                disk.link_stays_in_its_tree(link, target),
                stays,
                "{link} -> {target}"
            );
        }
    }

    #[test]
    fn a_mount_of_the_root_is_the_whole_disk() {
        let base = tempfile::tempdir().unwrap();
        let disk = Disk::new(base.path(), "/");
        assert_eq!(
            disk.resolve("/", "/tmp/x").1.unwrap(),
            base.path().join("tmp/x")
        );
        assert_eq!(disk.resolve("/", "/").1.unwrap(), base.path());
        assert_eq!(
            disk.shown(&base.path().join("a/b")).as_deref(),
            Some("/a/b")
        );
    }
}
