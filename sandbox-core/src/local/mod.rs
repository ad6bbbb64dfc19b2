//! The embedded `local` provider: each sandbox a private directory on this machine, with real child processes. It is not an isolation boundary.
