//! One error type for every provider: a [`ErrorKind`] to branch on, the context of the failed call,
//! and whether retrying can help.
//!
//! Adapters build errors with [`Error::new`] and the `with_*` setters, in exactly one mapping
//! function per adapter. No transport, SSH or serde type appears here: the source is kept only as a
//! boxed [`std::error::Error`], and its text is never shown by [`Error`]'s `Display`, so a secret that
//! a lower layer printed into its own message cannot leak through ours.

use crate::text::escape_controls;
use std::fmt;
use std::time::Duration;

/// Result alias used across the SDK.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, independent of provider. Match on it to decide what to do next.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum ErrorKind {
    /// The sandbox, file, process or template does not exist.
    NotFound,
    /// Credentials are missing, wrong, expired, or lack permission.
    Unauthorized,
    /// A request or a process ran past its deadline.
    Timeout,
    /// A rate limit or quota was hit; [`Error::retry_after`] says when to try again, when known.
    QuotaExceeded,
    /// The provider does not offer this operation; nothing was sent.
    NotSupported,
    /// The operation conflicts with the current state (a lease, a state change in progress, a name taken).
    Conflict,
    /// The input was rejected before or by the provider (empty command, NUL byte, bad path, bad option).
    Validation,
    /// No provider of the requested name is configured.
    ProviderNotFound,
    /// Every provider in a fallback chain failed; [`Error::attempts`] lists each attempt.
    AllProvidersFailed,
    /// The provider answered with an error that fits no other kind.
    Provider,
    /// The connection failed, was reset, or a stream ended early.
    Transport,
    /// The caller cancelled the operation.
    Cancelled,
    /// The sandbox exists but is paused, stopped, or gone from the edge: it is not running.
    NotRunning,
    /// A code context's state is gone: its kernel was killed or died. Restart or remove it;
    /// the SDK never swaps in a fresh context silently.
    ContextLost,
}

impl ErrorKind {
    /// Whether an error of this kind is worth retrying when the adapter did not say otherwise.
    ///
    /// `Provider` errors are retryable only for 5xx statuses; see [`Error::is_retryable`].
    pub fn is_retryable_by_default(self) -> bool {
        matches!(
            self,
            ErrorKind::Timeout | ErrorKind::QuotaExceeded | ErrorKind::Transport
        )
    }

    /// The kind's name, as shown in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not found",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Timeout => "timed out",
            ErrorKind::QuotaExceeded => "quota exceeded",
            ErrorKind::NotSupported => "not supported",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Validation => "invalid input",
            ErrorKind::ProviderNotFound => "provider not found",
            ErrorKind::AllProvidersFailed => "all providers failed",
            ErrorKind::Provider => "provider error",
            ErrorKind::Transport => "transport error",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::NotRunning => "sandbox not running",
            ErrorKind::ContextLost => "code context lost",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One failed attempt inside an [`ErrorKind::AllProvidersFailed`] error.
#[derive(Debug)]
pub struct Attempt {
    /// The provider that was tried.
    pub provider: String,
    /// Why it failed.
    pub error: Error,
}

/// The SDK's error: a kind, a message naming what failed, and the context of the call.
pub struct Error(Box<Inner>);

struct Inner {
    kind: ErrorKind,
    message: String,
    provider: Option<String>,
    operation: Option<String>,
    sandbox_id: Option<String>,
    status: Option<u16>,
    request_id: Option<String>,
    retry_after: Option<Duration>,
    retryable: Option<bool>,
    ambiguous: bool,
    attempts: Vec<Attempt>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    /// A new error of `kind` with a message that names what failed.
    ///
    /// The message must never contain a secret; adapters pass response bodies through their
    /// mapping function, which keeps only the provider's own message. Control characters in it
    /// (a provider's or a command's text can carry newlines and terminal escapes) are escaped
    /// (`\n`, `\u{1b}`), so an error is one line that cannot forge log lines or drive a
    /// terminal.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error(Box::new(Inner {
            kind,
            message: escape_controls(&message.into()).into_owned(),
            provider: None,
            operation: None,
            sandbox_id: None,
            status: None,
            request_id: None,
            retry_after: None,
            retryable: None,
            ambiguous: false,
            attempts: Vec::new(),
            source: None,
        }))
    }

    /// A [`ErrorKind::NotSupported`] error naming provider and operation.
    pub fn not_supported(provider: &str, operation: &str) -> Self {
        Error::new(
            ErrorKind::NotSupported,
            format!("{provider} does not support {operation}"),
        )
        .with_provider(provider)
        .with_operation(operation)
    }

    /// A [`ErrorKind::Validation`] error.
    pub fn validation(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Validation, message)
    }

    /// An [`ErrorKind::AllProvidersFailed`] error that lists every attempt in order.
    pub fn all_providers_failed(attempts: Vec<Attempt>) -> Self {
        let names: Vec<String> = attempts
            .iter()
            .map(|a| format!("{} ({})", a.provider, a.error.kind()))
            .collect();
        let mut error = Error::new(
            ErrorKind::AllProvidersFailed,
            format!("{} provider(s) tried: {}", attempts.len(), names.join(", ")),
        );
        error.0.attempts = attempts;
        error
    }

    /// Sets the provider name.
    pub fn with_provider(mut self, provider: impl Into<String>) -> Self {
        self.0.provider = Some(provider.into());
        self
    }

    /// Sets the operation that failed (`create`, `exec`, `read_file`, ...).
    pub fn with_operation(mut self, operation: impl Into<String>) -> Self {
        self.0.operation = Some(operation.into());
        self
    }

    /// Sets the sandbox the operation was aimed at.
    pub fn with_sandbox_id(mut self, id: impl Into<String>) -> Self {
        self.0.sandbox_id = Some(id.into());
        self
    }

    /// Sets the HTTP status the provider answered with.
    pub fn with_status(mut self, status: u16) -> Self {
        self.0.status = Some(status);
        self
    }

    /// Sets the provider's request id, for support tickets.
    pub fn with_request_id(mut self, request_id: impl Into<String>) -> Self {
        self.0.request_id = Some(request_id.into());
        self
    }

    /// Sets how long the provider asked us to wait before retrying.
    pub fn with_retry_after(mut self, delay: Duration) -> Self {
        self.0.retry_after = Some(delay);
        self
    }

    /// Overrides whether the error is retryable (adapters know better than the kind sometimes).
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.0.retryable = Some(retryable);
        self
    }

    /// Marks whether the request may have taken effect although no answer said so (see
    /// [`Error::is_ambiguous`]).
    pub fn with_ambiguous(mut self, ambiguous: bool) -> Self {
        self.0.ambiguous = ambiguous;
        self
    }

    /// Adds a sentence to the message (for example how many attempts a retried call made).
    pub fn with_note(mut self, note: impl AsRef<str>) -> Self {
        self.0.message.push_str(" (");
        self.0.message.push_str(&escape_controls(note.as_ref()));
        self.0.message.push(')');
        self
    }

    /// Keeps the underlying cause. Its text is not shown by `Display`.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.0.source = Some(Box::new(source));
        self
    }

    /// Fills provider, operation and sandbox id where they are not set yet.
    pub fn or_context(mut self, provider: &str, operation: &str, sandbox_id: Option<&str>) -> Self {
        let inner = &mut self.0;
        inner.provider.get_or_insert_with(|| provider.to_owned());
        inner.operation.get_or_insert_with(|| operation.to_owned());
        if let (None, Some(id)) = (&inner.sandbox_id, sandbox_id) {
            inner.sandbox_id = Some(id.to_owned());
        }
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The message, without the context prefix that `Display` adds.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// The provider that failed, when known.
    pub fn provider(&self) -> Option<&str> {
        self.0.provider.as_deref()
    }

    /// The operation that failed, when known.
    pub fn operation(&self) -> Option<&str> {
        self.0.operation.as_deref()
    }

    /// The sandbox the operation was aimed at, when known.
    pub fn sandbox_id(&self) -> Option<&str> {
        self.0.sandbox_id.as_deref()
    }

    /// The HTTP status, when the provider answered.
    pub fn status(&self) -> Option<u16> {
        self.0.status
    }

    /// The provider's request id, when it sent one.
    pub fn request_id(&self) -> Option<&str> {
        self.0.request_id.as_deref()
    }

    /// How long to wait before retrying, when the provider said.
    pub fn retry_after(&self) -> Option<Duration> {
        self.0.retry_after
    }

    /// Each provider tried, for [`ErrorKind::AllProvidersFailed`]; empty otherwise.
    pub fn attempts(&self) -> &[Attempt] {
        &self.0.attempts
    }

    /// Whether the request may have taken effect although it failed: it timed out or lost its
    /// connection after it was sent, or a gateway answered for a server that may have processed
    /// it (HTTP 408, 500, 502, 504). A `create` that fails this way may have made a sandbox, so it
    /// is looked up before it is sent again ([`crate::idempotency`]). A connection refused, a
    /// 429 or a 503 is not ambiguous: nothing was done.
    pub fn is_ambiguous(&self) -> bool {
        self.0.ambiguous
    }

    /// Whether retrying the same request can succeed: the adapter's override if it set one,
    /// otherwise decided by the kind (and, for `Provider` errors, a 5xx status).
    pub fn is_retryable(&self) -> bool {
        if let Some(retryable) = self.0.retryable {
            return retryable;
        }
        match self.0.kind {
            ErrorKind::Provider => matches!(self.0.status, Some(500..=599)),
            kind => kind.is_retryable_by_default(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.0;
        if let Some(provider) = &inner.provider {
            write!(f, "{provider}")?;
            if let Some(op) = &inner.operation {
                write!(f, " {op}")?;
            }
            if let Some(id) = &inner.sandbox_id {
                write!(f, " on sandbox {id}")?;
            }
            f.write_str(": ")?;
        } else if let Some(op) = &inner.operation {
            write!(f, "{op}: ")?;
        }
        write!(f, "{}: {}", inner.kind, inner.message)?;
        let mut extras = Vec::new();
        if let Some(status) = inner.status {
            extras.push(format!("HTTP {status}"));
        }
        if let Some(id) = &inner.request_id {
            extras.push(format!("request id {id}"));
        }
        if let Some(delay) = inner.retry_after {
            extras.push(format!("retry after {}ms", delay.as_millis()));
        }
        if !extras.is_empty() {
            write!(f, " ({})", extras.join(", "))?;
        }
        for attempt in &inner.attempts {
            write!(f, "; {}: {}", attempt.provider, attempt.error)?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.0;
        f.debug_struct("Error")
            .field("kind", &inner.kind)
            .field("message", &inner.message)
            .field("provider", &inner.provider)
            .field("operation", &inner.operation)
            .field("sandbox_id", &inner.sandbox_id)
            .field("status", &inner.status)
            .field("request_id", &inner.request_id)
            .field("retry_after", &inner.retry_after)
            .field("retryable", &self.is_retryable())
            .field("ambiguous", &self.0.ambiguous)
            .field("attempts", &inner.attempts)
            .field("has_source", &inner.source.is_some())
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0
            .source
            .as_ref()
            .map(|s| s.as_ref() as &(dyn std::error::Error + 'static))
    }
}

/// An io error becomes our error in one way: when it wraps one of ours (as the conversion the
/// other way does, for a stdin write, an upload reader or a download read through `AsyncRead`),
/// that error comes back whole, kind, status and retry-after included; otherwise the kind
/// follows the io error's kind (a reset is `Transport`, a missing file `NotFound`, ...).
impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        use std::io::ErrorKind as Io;
        let e = if e.get_ref().is_some_and(|inner| inner.is::<Error>()) {
            let kind = e.kind();
            match e.into_inner().map(|inner| inner.downcast::<Error>()) {
                Some(Ok(ours)) => return *ours,
                Some(Err(other)) => std::io::Error::new(kind, other),
                None => std::io::Error::from(kind),
            }
        } else {
            e
        };
        let kind = match e.kind() {
            Io::NotFound => ErrorKind::NotFound,
            Io::PermissionDenied => ErrorKind::Unauthorized,
            Io::TimedOut => ErrorKind::Timeout,
            Io::InvalidInput | Io::InvalidData => ErrorKind::Validation,
            Io::AlreadyExists => ErrorKind::Conflict,
            Io::ConnectionReset
            | Io::ConnectionAborted
            | Io::ConnectionRefused
            | Io::BrokenPipe
            | Io::UnexpectedEof => ErrorKind::Transport,
            _ => ErrorKind::Provider,
        };
        let message = e.to_string();
        Error::new(kind, message).with_source(e)
    }
}

/// Our error as an io error (for `AsyncRead`/`AsyncWrite` surfaces such as [`crate::Stdin`]):
/// the io kind is the nearest match, and the error itself rides inside, so `Error::from` of
/// the io error gets it back whole.
impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        use std::io::ErrorKind as Io;
        let kind = match e.kind() {
            ErrorKind::NotFound => Io::NotFound,
            ErrorKind::Unauthorized => Io::PermissionDenied,
            ErrorKind::Timeout => Io::TimedOut,
            ErrorKind::Validation => Io::InvalidInput,
            ErrorKind::Transport => Io::ConnectionReset,
            _ => Io::Other,
        };
        std::io::Error::new(kind, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_provider_operation_sandbox_and_status() {
        let e = Error::new(ErrorKind::NotFound, "no such sandbox")
            .with_provider("e2b")
            .with_operation("connect")
            .with_sandbox_id("sb-1")
            .with_status(404)
            .with_request_id("req-9");
        assert_eq!(
            e.to_string(),
            "e2b connect on sandbox sb-1: not found: no such sandbox (HTTP 404, request id req-9)"
        );
    }

    #[test]
    fn retryability_follows_kind_status_and_override() {
        let cases = [
            (ErrorKind::NotFound, None, false),
            (ErrorKind::Unauthorized, None, false),
            (ErrorKind::Timeout, None, true),
            (ErrorKind::QuotaExceeded, Some(429), true),
            (ErrorKind::NotSupported, None, false),
            (ErrorKind::Conflict, Some(409), false),
            (ErrorKind::Validation, Some(400), false),
            (ErrorKind::ProviderNotFound, None, false),
            (ErrorKind::AllProvidersFailed, None, false),
            (ErrorKind::Provider, Some(500), true),
            (ErrorKind::Provider, Some(503), true),
            (ErrorKind::Provider, Some(418), false),
            (ErrorKind::Provider, None, false),
            (ErrorKind::Transport, None, true),
            (ErrorKind::Cancelled, None, false),
            (ErrorKind::NotRunning, Some(502), false),
        ];
        for (kind, status, expected) in cases {
            let mut e = Error::new(kind, "x");
            if let Some(s) = status {
                e = e.with_status(s);
            }
            assert_eq!(e.is_retryable(), expected, "{kind:?} {status:?}");
        }
        let e = Error::new(ErrorKind::Conflict, "state change in progress").with_retryable(true);
        assert!(e.is_retryable());
        let e = Error::new(ErrorKind::Transport, "reset").with_retryable(false);
        assert!(!e.is_retryable());
    }

    #[test]
    fn retry_after_is_kept_and_shown() {
        let e = Error::new(ErrorKind::QuotaExceeded, "slow down")
            .with_retry_after(Duration::from_secs(3));
        assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));
        assert!(e.to_string().contains("retry after 3000ms"));
    }

    #[test]
    fn all_providers_failed_lists_every_attempt_in_order() {
        let e = Error::all_providers_failed(vec![
            Attempt {
                provider: "e2b".into(),
                error: Error::new(ErrorKind::QuotaExceeded, "busy"),
            },
            Attempt {
                provider: "fly".into(),
                error: Error::new(ErrorKind::Transport, "reset"),
            },
        ]);
        assert_eq!(e.kind(), ErrorKind::AllProvidersFailed);
        let names: Vec<_> = e.attempts().iter().map(|a| a.provider.as_str()).collect();
        assert_eq!(names, ["e2b", "fly"]);
        let text = e.to_string();
        assert!(
            text.contains("e2b (quota exceeded), fly (transport error)"),
            "{text}"
        );
    }

    #[test]
    fn io_errors_map_to_kinds() {
        let e: Error = std::io::Error::from(std::io::ErrorKind::NotFound).into();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        let e: Error = std::io::Error::from(std::io::ErrorKind::ConnectionReset).into();
        assert_eq!(e.kind(), ErrorKind::Transport);
        assert!(e.is_retryable());
    }

    #[test]
    fn an_error_through_io_keeps_its_kind_and_details() {
        for kind in [
            ErrorKind::Unauthorized,
            ErrorKind::QuotaExceeded,
            ErrorKind::Conflict,
            ErrorKind::Timeout,
        ] {
            let ours = Error::new(kind, "stdin write failed")
                .with_status(418)
                .with_retry_after(std::time::Duration::from_secs(3));
            let through: std::io::Error = ours.into();
            let back = Error::from(through);
            assert_eq!(back.kind(), kind);
            assert_eq!(back.status(), Some(418));
            assert_eq!(back.retry_after(), Some(std::time::Duration::from_secs(3)));
            assert_eq!(back.message(), "stdin write failed");
        }
        // Another error inside an io error is not mistaken for ours.
        let other = std::io::Error::new(std::io::ErrorKind::TimedOut, "slow disk");
        assert_eq!(Error::from(other).kind(), ErrorKind::Timeout);
    }

    #[test]
    fn control_characters_in_messages_are_escaped() {
        let stderr = "boom\n2026-12-01 INFO login ok\u{1b}[2J\ttab";
        let e =
            Error::new(ErrorKind::Provider, format!("command failed: {stderr}")).with_note("a\rb");
        let shown = e.to_string();
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(
            shown.contains(r"boom\n2026-12-01 INFO login ok\u{1b}[2J\ttab"),
            "{shown}"
        );
        assert!(shown.contains(r"(a\rb)"), "{shown}");
        assert_eq!(Error::new(ErrorKind::Provider, "plain").message(), "plain");
    }

    #[test]
    fn source_text_is_not_displayed() {
        let src = std::io::Error::other("Authorization: Bearer canary-secret");
        let e = Error::new(ErrorKind::Transport, "connection failed").with_source(src);
        assert!(!e.to_string().contains("canary"));
        assert!(!format!("{e:?}").contains("canary"));
    }
}
