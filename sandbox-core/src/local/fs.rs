//! File operations of a local sandbox, on the host filesystem.

use crate::error::{Error, ErrorKind, Result};
use crate::files::{ByteStream, FileInfo, FileKind};
use futures::{StreamExt, TryStreamExt};
use std::path::{Path, PathBuf};
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

/// Writes everything `body` yields to `target`, creating parents and replacing any file there.
/// The copy goes through a fixed-size buffer, so memory stays constant.
pub(crate) async fn write_from(
    target: &Path,
    shown: &str,
    body: impl AsyncRead + Unpin,
) -> Result<u64> {
    if let Some(parent) = target.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| io_error(e, "cannot create the parent directories of", shown))?;
    }
    let mut file = tokio::fs::File::create(target)
        .await
        .map_err(|e| io_error(e, "cannot create", shown))?;
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

/// Opens `target` for a lazy, chunked download.
pub(crate) async fn download(target: &Path, shown: &str) -> Result<ByteStream> {
    let file = tokio::fs::File::open(target)
        .await
        .map_err(|e| io_error(e, "cannot open", shown))?;
    let meta = file
        .metadata()
        .await
        .map_err(|e| io_error(e, "cannot stat", shown))?;
    if meta.is_dir() {
        return Err(Error::validation(format!(
            "cannot download {shown}: it is a directory"
        )));
    }
    let shown = shown.to_owned();
    Ok(ReaderStream::with_capacity(file, CHUNK)
        .map_err(move |e| io_error(e, "cannot read", &shown))
        .boxed())
}

fn kind_of(ft: std::fs::FileType) -> FileKind {
    if ft.is_symlink() {
        FileKind::Symlink
    } else if ft.is_dir() {
        FileKind::Dir
    } else if ft.is_file() {
        FileKind::File
    } else {
        FileKind::Other
    }
}

fn info(path: String, name: String, meta: &std::fs::Metadata) -> FileInfo {
    use std::os::unix::fs::PermissionsExt;
    FileInfo {
        path,
        name,
        kind: kind_of(meta.file_type()),
        size: meta.len(),
        mode: Some(meta.permissions().mode() & 0o7777),
        modified: meta.modified().ok(),
    }
}

/// Metadata of `target` itself (a symlink is reported as a symlink).
pub(crate) async fn stat(target: &Path, shown: &str) -> Result<FileInfo> {
    let meta = tokio::fs::symlink_metadata(target)
        .await
        .map_err(|e| io_error(e, "cannot stat", shown))?;
    let name = match target.file_name() {
        Some(n) => n
            .to_str()
            .ok_or_else(|| {
                Error::validation(format!(
                    "file name {:?} is not valid UTF-8",
                    n.to_string_lossy()
                ))
            })?
            .to_owned(),
        None => shown.to_owned(),
    };
    Ok(info(shown.to_owned(), name, &meta))
}

/// Lists `target` down to `depth` levels (1 = its own entries), sorted by path. Entries are named
/// `shown/child/...`; symbolic links are listed but not followed.
pub(crate) async fn list(target: &Path, shown: &str, depth: u32) -> Result<Vec<FileInfo>> {
    let meta = tokio::fs::metadata(target)
        .await
        .map_err(|e| io_error(e, "cannot list", shown))?;
    if !meta.is_dir() {
        return Err(Error::validation(format!(
            "cannot list {shown}: it is not a directory"
        )));
    }
    let mut out = Vec::new();
    let mut pending: Vec<(PathBuf, String, u32)> =
        vec![(target.to_owned(), shown.trim_end_matches('/').to_owned(), 1)];
    if pending[0].1.is_empty() {
        pending[0].1 = "/".to_owned();
    }
    while let Some((dir, dir_shown, level)) = pending.pop() {
        let mut entries = tokio::fs::read_dir(&dir)
            .await
            .map_err(|e| io_error(e, "cannot list", &dir_shown))?;
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(|e| io_error(e, "cannot list", &dir_shown))?
        {
            let raw = entry.file_name();
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
            let meta = tokio::fs::symlink_metadata(entry.path())
                .await
                .map_err(|e| io_error(e, "cannot stat", &child_shown))?;
            if meta.is_dir() && level < depth {
                pending.push((entry.path(), child_shown.clone(), level + 1));
            }
            out.push(info(child_shown, name.to_owned(), &meta));
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Removes a file or a whole tree; a missing path is `NotFound`.
///
/// A symbolic link is removed itself, never what it points to, however the path spells it
/// (`link`, `link/`, `link/.`), and a tree is removed without following the links inside it.
/// Links in the leading components are resolved first, and the guards apply to where the path
/// really leads: never a host root, never `protected` (the sandbox's working directory) or a
/// directory containing it.
pub(crate) async fn remove(target: &Path, shown: &str, protected: &Path) -> Result<()> {
    let (target, shown, protected) = (target.to_owned(), shown.to_owned(), protected.to_owned());
    tokio::task::spawn_blocking(move || remove_blocking(&target, &shown, &protected))
        .await
        .map_err(|e| Error::new(ErrorKind::Provider, format!("remove task failed: {e}")))?
}

fn remove_blocking(target: &Path, shown: &str, protected: &Path) -> Result<()> {
    let resolved = resolve_but_last(target).map_err(|e| io_error(e, "cannot remove", shown))?;
    let protected = std::fs::canonicalize(protected).unwrap_or_else(|_| protected.to_owned());
    if resolved.parent().is_none() || protected.starts_with(&resolved) {
        return Err(Error::validation(format!(
            "refusing to remove {shown}: it leads to {}, which is a host root or contains the \
             sandbox's working directory",
            resolved.display()
        )));
    }
    let meta =
        std::fs::symlink_metadata(&resolved).map_err(|e| io_error(e, "cannot remove", shown))?;
    // `remove_dir_all` does not follow a link at the top (it was checked just above and is
    // opened with O_NOFOLLOW) nor inside the tree.
    let result = if meta.is_dir() {
        std::fs::remove_dir_all(&resolved)
    } else {
        std::fs::remove_file(&resolved)
    };
    result.map_err(|e| io_error(e, "cannot remove", shown))
}

/// `target` with every symbolic link resolved except in its last component, which is named as
/// is (so a link there stays the link). Trailing slashes and `.` components are dropped: they
/// would make the system follow a final link. A path ending in `..` (or the root) names a
/// directory, resolved in full.
fn resolve_but_last(target: &Path) -> std::io::Result<PathBuf> {
    use std::path::Component;
    let clean: PathBuf = target.components().collect();
    match (clean.components().next_back(), clean.parent()) {
        (Some(Component::Normal(name)), Some(parent)) => {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            Ok(std::fs::canonicalize(parent)?.join(name))
        }
        _ => std::fs::canonicalize(&clean),
    }
}

/// Creates a directory and its parents; an existing directory is fine, an existing file is not.
pub(crate) async fn mkdir(target: &Path, shown: &str) -> Result<()> {
    tokio::fs::create_dir_all(target)
        .await
        .map_err(|e| io_error(e, "cannot create directory", shown))?;
    Ok(())
}

/// Renames `from` to `to`, creating the parents of `to`.
pub(crate) async fn rename(from: &Path, from_shown: &str, to: &Path, to_shown: &str) -> Result<()> {
    tokio::fs::symlink_metadata(from)
        .await
        .map_err(|e| io_error(e, "cannot rename", from_shown))?;
    if let Some(parent) = to.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| io_error(e, "cannot create the parent directories of", to_shown))?;
    }
    tokio::fs::rename(from, to).await.map_err(|e| {
        let kind = Error::from(std::io::Error::from(e.kind())).kind();
        Error::new(
            kind,
            format!("cannot rename {from_shown} to {to_shown}: {e}"),
        )
        .with_source(e)
    })
}
