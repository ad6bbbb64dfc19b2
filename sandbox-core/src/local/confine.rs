//! How a local sandbox's processes are confined, on top of [`sandbox_confine`]: which layers a
//! provider asks for, the anchor each sandbox keeps, and where its view puts things.
//!
//! A confined sandbox's commands see its work directory at its home (`/home/user` by
//! default) and its own `tmp` directory at `/tmp`; the file primitives map those absolute
//! paths the same way, so `/home/user/x` written through the API is the `/home/user/x` a
//! command reads.

use super::fs;
use crate::error::{Error, ErrorKind, Result};
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use sandbox_confine::{Confine, Layers, Limits, SANDBOX_UID};

#[cfg(target_os = "linux")]
use sandbox_confine::{Anchor, ViewSpec};

/// Stands in for the anchor where there is none to make (not Linux).
#[cfg(not(target_os = "linux"))]
#[derive(Debug)]
pub(crate) struct Anchor;

#[cfg(not(target_os = "linux"))]
impl Anchor {
    fn members(&self) -> Vec<i32> {
        Vec::new()
    }
    fn kill(&self) {}
    pub(crate) fn confine(
        self: &Arc<Self>,
        _cmd: &mut std::process::Command,
        _cwd: &str,
    ) -> std::io::Result<()> {
        Ok(())
    }
}

/// Where an anchor's pid and start time are kept, so a later process adopts it.
const ANCHOR_FILE: &str = "state/anchor";

/// What a provider asks of its sandboxes' confinement.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub mode: Confine,
    pub network: bool,
    pub limits: Limits,
    pub home: String,
    /// The sandboxes end with this process.
    pub tethered: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mode: Confine::default(),
            network: false,
            limits: Limits::default(),
            home: "/home/user".into(),
            tethered: false,
        }
    }
}

impl Settings {
    /// Confines the sandbox whose directory is `base` (blocking).
    pub(crate) fn start(&self, base: &Path) -> Result<Confined> {
        if self.mode == Confine::Off {
            return Ok(self.unconfined(base, "turned off (Confine::Off)".into()));
        }
        match self.make_anchor(base) {
            Ok(anchor) => Ok(self.confined(base, anchor)),
            Err(why) if self.mode == Confine::BestEffort => Ok(self.unconfined(base, why)),
            Err(why) => Err(Error::new(
                ErrorKind::NotSupported,
                format!(
                    "cannot confine a local sandbox on this machine ({why}); \
                     LocalProvider::confine(Confine::BestEffort) runs with what there is, \
                     Confine::Off runs commands as plain host processes"
                ),
            )),
        }
    }

    /// Confines a sandbox an earlier process left: its anchor when it still runs, else a new
    /// one (blocking).
    pub(crate) fn reopen(&self, base: &Path) -> Result<Confined> {
        #[cfg(target_os = "linux")]
        if self.mode != Confine::Off
            && let Some(anchor) = self.adopt(base)
        {
            return Ok(self.confined(base, anchor));
        }
        self.start(base)
    }

    /// The layers a sandbox would get, found by making one anchor in a scratch directory.
    pub(crate) fn probe(&self) -> Layers {
        match tempfile::tempdir() {
            Ok(scratch) => {
                let _ = std::fs::create_dir_all(scratch.path().join("state"));
                match self.start(scratch.path()) {
                    Ok(confined) => confined.layers.clone(),
                    Err(e) => Layers {
                        missing: vec![e.message().to_string()],
                        ..Layers::default()
                    },
                }
            }
            Err(e) => Layers {
                missing: vec![format!("cannot make a scratch directory: {e}")],
                ..Layers::default()
            },
        }
    }

    #[cfg(target_os = "linux")]
    fn view(&self, base: &Path) -> ViewSpec {
        ViewSpec {
            work: base.join("work"),
            tmp: base.join("tmp"),
            home: self.home.clone(),
            network_off: !self.network,
            tethered: self.tethered,
        }
    }

    #[cfg(target_os = "linux")]
    fn make_anchor(&self, base: &Path) -> std::result::Result<Anchor, String> {
        let anchor = Anchor::start(&self.view(base), self.limits)?;
        if let Some(started) = anchor.start_time() {
            let _ = std::fs::write(
                base.join(ANCHOR_FILE),
                format!("{} {started}\n", anchor.pid()),
            );
        }
        Ok(anchor)
    }

    #[cfg(not(target_os = "linux"))]
    fn make_anchor(&self, _base: &Path) -> std::result::Result<Anchor, String> {
        Err("confinement needs Linux".into())
    }

    #[cfg(target_os = "linux")]
    fn adopt(&self, base: &Path) -> Option<Anchor> {
        let text = std::fs::read_to_string(base.join(ANCHOR_FILE)).ok()?;
        let mut fields = text.split_whitespace();
        let pid = fields.next()?.parse().ok()?;
        let started = fields.next()?.parse().ok()?;
        Anchor::adopt(pid, started, &self.view(base), self.limits)
    }

    fn confined(&self, base: &Path, anchor: Anchor) -> Confined {
        #[cfg(target_os = "linux")]
        let layers = anchor.layers().clone();
        #[cfg(not(target_os = "linux"))]
        let layers = Layers::default();
        Confined {
            anchor: Some(Arc::new(anchor)),
            layers,
            ..self.unconfined(base, String::new())
        }
    }

    fn unconfined(&self, base: &Path, why: String) -> Confined {
        Confined {
            anchor: None,
            layers: Layers {
                missing: if why.is_empty() {
                    Vec::new()
                } else {
                    vec![why]
                },
                ..Layers::default()
            },
            home: self.home.clone(),
            work: base.join("work"),
            tmp: base.join("tmp"),
            network_off: !self.network,
        }
    }
}

/// What confines one sandbox: its anchor (none when unconfined) and its view.
#[derive(Debug)]
pub(crate) struct Confined {
    pub anchor: Option<Arc<Anchor>>,
    pub layers: Layers,
    home: String,
    work: PathBuf,
    tmp: PathBuf,
    network_off: bool,
}

impl Confined {
    /// The work directory's [`fs::Root`], mapping the view's absolute paths when confined.
    pub(crate) fn view_root(&self, root: fs::Root) -> std::io::Result<fs::Root> {
        if self.anchor.is_none() {
            return Ok(root);
        }
        // As root, what the file primitives make is handed to the sandbox's own root user.
        let owner = nix::unistd::geteuid()
            .is_root()
            .then_some((SANDBOX_UID, SANDBOX_UID));
        root.with_view(Path::new(&self.home), &self.tmp, owner)
    }

    /// A command's cwd inside the view: home when unset, relative ones under home.
    pub(crate) fn inside_cwd(&self, cwd: Option<&str>) -> String {
        match cwd {
            None => self.home.clone(),
            Some(path) if path.starts_with('/') => path.to_string(),
            Some(path) => format!("{}/{path}", self.home.trim_end_matches('/')),
        }
    }

    /// The host path of a path inside the view, where it is one of the sandbox's own.
    pub(crate) fn host_path(&self, inside: &str) -> Option<PathBuf> {
        let path = Path::new(inside);
        if let Ok(rest) = path.strip_prefix(&self.home) {
            return Some(self.work.join(rest));
        }
        path.strip_prefix("/tmp")
            .ok()
            .map(|rest| self.tmp.join(rest))
    }

    /// The variables a confined command starts with, before the sandbox's and its own.
    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("HOME", self.home.clone()),
            ("TMPDIR", "/tmp".into()),
            ("PATH", sandbox_confine::PATH.into()),
        ]
    }

    /// Sends `signal` to every process of the sandbox's PID namespace.
    pub(crate) fn signal_members(&self, signal: Signal) {
        if let Some(anchor) = &self.anchor {
            for pid in anchor.members() {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
            }
        }
    }

    /// Ends the anchor and with it every process of the sandbox.
    pub(crate) fn end(&self) {
        if let Some(anchor) = &self.anchor {
            anchor.kill();
        }
    }

    /// True when the sandbox runs confined without network.
    pub(crate) fn network_off(&self) -> bool {
        self.anchor.is_some() && self.network_off
    }
}
