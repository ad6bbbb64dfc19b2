//! Ways into a sandbox from outside: preview links for a port, and SSH access.

use std::collections::BTreeMap;
use std::fmt;
use std::time::SystemTime;

/// A URL that reaches a port inside a sandbox, with whatever must be sent along.
///
/// `headers` may hold the access token; `Debug` shows only the header names.
#[derive(Clone, PartialEq, Eq)]
pub struct PreviewLink {
    /// The URL to call.
    pub url: String,
    /// The port inside the sandbox.
    pub port: u16,
    /// Headers each request must carry (access token, warning skip, ...).
    pub headers: BTreeMap<String, String>,
    /// The access token, when the link is private.
    pub token: Option<String>,
    /// When the link or token stops working.
    pub expires_at: Option<SystemTime>,
}

impl PreviewLink {
    /// The URL as `Debug` shows it: no query string or fragment (signatures), and the token
    /// replaced wherever it appears (signed links carry it in the host or path).
    fn url_for_display(&self) -> String {
        let end = self.url.find(['?', '#']).unwrap_or(self.url.len());
        let url = &self.url[..end];
        match &self.token {
            Some(token) if !token.is_empty() => url.replace(token.as_str(), "<redacted>"),
            _ => url.to_owned(),
        }
    }
}

impl fmt::Debug for PreviewLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreviewLink")
            .field("url", &self.url_for_display())
            .field("port", &self.port)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// Everything needed to open an SSH session to a sandbox. `Debug` never shows the token.
#[derive(Clone, PartialEq, Eq)]
pub struct SshAccess {
    /// Host to connect to.
    pub host: String,
    /// Port to connect to.
    pub port: u16,
    /// User name to log in as (some providers use the token itself).
    pub user: String,
    /// The access token or password, when there is one.
    pub token: Option<String>,
    /// When the access stops working.
    pub expires_at: Option<SystemTime>,
}

impl SshAccess {
    /// A ready-to-run `ssh` command line (it contains the token when the user is the token).
    pub fn command(&self) -> String {
        format!("ssh -p {} {}@{}", self.port, self.user, self.host)
    }
}

impl fmt::Debug for SshAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let user_is_token = self.token.as_deref() == Some(self.user.as_str());
        f.debug_struct("SshAccess")
            .field("host", &self.host)
            .field("port", &self.port)
            .field(
                "user",
                &if user_is_token {
                    "<redacted>"
                } else {
                    self.user.as_str()
                },
            )
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("expires_at", &self.expires_at)
            .finish()
    }
}
