//! Pseudo-terminals for TTY exec sessions (PROTOCOL.md §5.3): a master the simulator reads and
//! writes, a slave the command gets as stdin, stdout and stderr, and the window size.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::process::Stdio;

/// A pseudo-terminal pair.
pub(crate) struct Pty {
    /// The master side: the terminal's output is read here, input written here.
    pub master: File,
    /// The slave side, handed to the command.
    pub slave: File,
}

impl Pty {
    /// A new pseudo-terminal of `cols` × `rows`.
    pub fn open(cols: u16, rows: u16) -> std::io::Result<Pty> {
        use rustix::pty::OpenptFlags;
        let master: OwnedFd =
            rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
        rustix::pty::grantpt(&master)?;
        rustix::pty::unlockpt(&master)?;
        let name = rustix::pty::ptsname(&master, Vec::new())?;
        let path = std::path::PathBuf::from(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name.as_bytes()),
        );
        let slave = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(rustix::fs::OFlags::NOCTTY.bits() as i32)
                .open(path)?
        };
        let pty = Pty {
            master: File::from(master),
            slave,
        };
        pty.resize(cols, rows)?;
        Ok(pty)
    }

    /// Sets the window size (the kernel tells the foreground process group with `SIGWINCH`).
    pub fn resize(&self, cols: u16, rows: u16) -> std::io::Result<()> {
        let size = rustix::termios::Winsize {
            ws_row: rows.max(1),
            ws_col: cols.max(1),
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        rustix::termios::tcsetwinsize(&self.master, size)?;
        Ok(())
    }

    /// One of the command's standard streams: the slave, duplicated.
    pub fn stdio(&self) -> std::io::Result<Stdio> {
        Ok(Stdio::from(self.slave.try_clone()?))
    }
}
