//! Paths a model hands to a tool, checked and normalised before any provider sees them.
//!
//! **The sandbox is the boundary.** These checks work on the text of a path: they reject NUL
//! bytes and empty paths, resolve `.` and `..`, and (with [`PathPolicy::confine_to`]) keep every
//! path under one directory of the sandbox. They do not follow symbolic links: a link inside the
//! sandbox may point anywhere the sandbox itself can see, and a command run by the model can read
//! and write whatever the sandbox lets it. What keeps the host safe is the sandbox, not these
//! checks. The embedded `local` provider is not an isolation boundary for commands: a command
//! the model runs reads and writes whatever the user can. Its file primitives do stay inside the
//! sandbox's directory (an absolute path elsewhere, `..` above it or a link out of it is refused
//! there as invalid input), so its read-only tools, which run nothing, read only the sandbox.

use crate::result::ToolError;

/// How the tools accept paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathPolicy {
    root: Option<String>,
}

impl PathPolicy {
    /// Any path the sandbox can see: relative paths resolve against the sandbox's working
    /// directory and may not climb above it with `..`; absolute paths are the sandbox's own.
    pub fn sandbox_view() -> Self {
        PathPolicy { root: None }
    }

    /// Only paths under `root` (an absolute path in the sandbox): relative paths are joined to
    /// it, absolute paths must lie under it after `.` and `..` are resolved.
    pub fn confine_to(root: impl Into<String>) -> Self {
        let root = root.into();
        let root = normalize_absolute(&root);
        PathPolicy { root: Some(root) }
    }

    /// The root paths are confined to, if any.
    pub fn root(&self) -> Option<&str> {
        self.root.as_deref()
    }

    /// Checks and normalises one path.
    pub fn resolve(&self, path: &str) -> Result<String, ToolError> {
        if path.is_empty() {
            return Err(ToolError::invalid_input(
                "the path is empty",
                "pass a file or directory path, relative to the working directory or absolute",
            ));
        }
        if path.contains('\0') {
            return Err(ToolError::invalid_input(
                "the path contains a NUL byte",
                "remove the NUL byte from the path",
            ));
        }
        if path.starts_with('/') {
            let normal = normalize_absolute(path);
            if let Some(root) = &self.root
                && !is_under(&normal, root)
            {
                return Err(outside(path, root));
            }
            return Ok(normal);
        }
        let mut parts: Vec<&str> = Vec::new();
        for part in path.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    if parts.pop().is_none() {
                        return Err(match &self.root {
                            Some(root) => outside(path, root),
                            None => ToolError::invalid_input(
                                format!("the path {path:?} climbs above the working directory"),
                                "use a path inside the working directory, or an absolute path",
                            ),
                        });
                    }
                }
                other => parts.push(other),
            }
        }
        let relative = parts.join("/");
        Ok(match &self.root {
            Some(root) if relative.is_empty() => root.clone(),
            Some(root) if root == "/" => format!("/{relative}"),
            Some(root) => format!("{root}/{relative}"),
            None if relative.is_empty() => ".".to_owned(),
            None => relative,
        })
    }
}

fn outside(path: &str, root: &str) -> ToolError {
    ToolError::invalid_input(
        format!("the path {path:?} is outside {root}, the only directory these tools may touch"),
        format!("use a path under {root} (relative paths are taken from there)"),
    )
}

fn is_under(path: &str, root: &str) -> bool {
    root == "/" || path == root || path.strip_prefix(root).is_some_and(|r| r.starts_with('/'))
}

fn normalize_absolute(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_normalised_and_may_not_climb_out() {
        let p = PathPolicy::sandbox_view();
        assert_eq!(p.resolve("a/./b//c/../d").unwrap(), "a/b/d");
        assert_eq!(p.resolve("./").unwrap(), ".");
        assert_eq!(p.resolve("a/..").unwrap(), ".");
        assert!(p.resolve("../x").is_err());
        assert!(p.resolve("a/../../x").is_err());
        assert_eq!(p.resolve("/etc/../tmp/x").unwrap(), "/tmp/x");
        assert_eq!(p.resolve("/..").unwrap(), "/");
    }

    #[test]
    fn nul_and_empty_are_rejected() {
        let p = PathPolicy::sandbox_view();
        assert!(p.resolve("").is_err());
        assert!(p.resolve("a\0b").is_err());
    }

    #[test]
    fn a_root_confines_every_path() {
        let p = PathPolicy::confine_to("/home/user/");
        assert_eq!(p.resolve("x/y").unwrap(), "/home/user/x/y");
        assert_eq!(p.resolve(".").unwrap(), "/home/user");
        assert_eq!(p.resolve("/home/user/a").unwrap(), "/home/user/a");
        assert!(p.resolve("/home/user2/a").is_err());
        assert!(p.resolve("/home/user/../other").is_err());
        assert!(p.resolve("../x").is_err());
        assert!(p.resolve("/etc/passwd").is_err());
        let p = PathPolicy::confine_to("/");
        assert_eq!(p.resolve("x").unwrap(), "/x");
    }
}
