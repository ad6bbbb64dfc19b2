//! The one check of a preview URL a provider's answer hands out: anyone given the link goes
//! there, so an answer must not be able to point it at another host, downgrade it to plain
//! http, or smuggle credentials or redirects into it.

use crate::error::{Error, ErrorKind, Result};
use url::{Host, Url};

/// Checks a preview URL from a provider's answer and returns it (the default port and an
/// empty path as the answer wrote them normalised away).
///
/// Accepted: `https://<label>.<domain>` with an optional `/` path, where `domain` is one of
/// `domains` and `<label>` is exactly one DNS label (letters, digits and inner `-`, at most 63
/// characters). Refused with a non-retryable [`ErrorKind::Provider`] error: any other scheme,
/// user info, a port other than 443, a path, a query, a fragment, a host that is an address,
/// the domain itself, more than one label under it, or characters a URL parser would drop or
/// rewrite (spaces, controls, backslashes, `%` escapes). The message says what is wrong without repeating
/// the URL, which may hold anything.
///
/// ```
/// use sandbox_sdk_core::http::checked_preview_url;
///
/// let ok = checked_preview_url("https://sb-3000.vercel.run", &["vercel.run"]).unwrap();
/// assert_eq!(ok, "https://sb-3000.vercel.run");
/// for bad in [
///     "http://sb-3000.vercel.run",
///     "https://user@sb-3000.vercel.run",
///     "https://sb-3000.vercel.run?next=/x",
///     "https://sb-3000.vercel.run.evil.example",
///     "https://a.b.vercel.run",
/// ] {
///     assert!(checked_preview_url(bad, &["vercel.run"]).is_err(), "{bad}");
/// }
/// ```
pub fn checked_preview_url(url: &str, domains: &[&str]) -> Result<String> {
    let refuse = |why: &str| {
        let on = domains.join(" or ");
        Err(Error::new(
            ErrorKind::Provider,
            format!("the provider answered with a preview URL this SDK will not hand out: {why} (only https://<name>.{on} is)"),
        )
        .with_retryable(false))
    };
    if url
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '\\' || c == '%')
    {
        return refuse("it holds spaces, control characters, backslashes or escapes");
    }
    let Ok(parsed) = Url::parse(url) else {
        return refuse("it is not a URL");
    };
    if parsed.scheme() != "https" {
        return refuse("it is not https");
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return refuse("it holds user info");
    }
    // `Url` drops the scheme's default port, so any port left is another one.
    if parsed.port().is_some() {
        return refuse("it names a port other than 443");
    }
    if parsed.path() != "/" {
        return refuse("it has a path");
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return refuse("it has a query or fragment");
    }
    let Some(Host::Domain(host)) = parsed.host() else {
        return refuse("its host is not a domain name");
    };
    let label = domains.iter().find_map(|domain| {
        host.strip_suffix(domain)
            .and_then(|rest| rest.strip_suffix('.'))
    });
    if !label.is_some_and(is_dns_label) {
        return refuse("its host is not one name directly under the provider's domain");
    }
    let mut out = parsed.to_string();
    if !url.ends_with('/') {
        out.pop();
    }
    Ok(out)
}

/// One DNS label: 1–63 letters, digits and `-`, not starting or ending with `-`.
fn is_dns_label(label: &str) -> bool {
    (1..=63).contains(&label.len())
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    const VERCEL: &[&str] = &["vercel.run"];

    #[test]
    fn the_documented_forms_pass_as_written() {
        for (url, want) in [
            (
                "https://sb-1-3000.vercel.run",
                "https://sb-1-3000.vercel.run",
            ),
            (
                "https://sb-1-3000.vercel.run/",
                "https://sb-1-3000.vercel.run/",
            ),
            (
                "https://sb-1-3000.vercel.run:443",
                "https://sb-1-3000.vercel.run",
            ),
            ("https://SB-1.Vercel.Run", "https://sb-1.vercel.run"),
        ] {
            assert_eq!(checked_preview_url(url, VERCEL).unwrap(), want);
        }
        assert!(
            checked_preview_url("https://a-1.sprites.app", &["vercel.run", "sprites.app"]).is_ok()
        );
    }

    #[test]
    fn everything_else_is_refused_without_echoing_the_url() {
        for url in [
            "",
            "sb.vercel.run",
            "javascript:alert(1)",
            "ftp://sb.vercel.run",
            "http://sb.vercel.run",
            "https://u@sb.vercel.run",
            "https://:p@sb.vercel.run",
            "https://sb.vercel.run:8443",
            "https://sb.vercel.run/x",
            "https://sb.vercel.run//evil.example",
            "https://sb.vercel.run?evil",
            "https://sb.vercel.run#evil",
            "https://vercel.run",
            "https://.vercel.run",
            "https://-sb.vercel.run",
            "https://a.b.vercel.run",
            "https://sb.vercel.run.evil.example",
            "https://sbvercel.run",
            "https://evil.example/sb.vercel.run",
            "https://sb.vercel.run\\@evil.example",
            "https://sb.vercel.run\t",
            "https://sb.vercel.r%75n",
            "https://127.0.0.1",
            "https://[::1]",
            &format!("https://{}.vercel.run", "a".repeat(64)),
        ] {
            let err = checked_preview_url(url, VERCEL).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Provider, "{url}");
            assert!(!err.is_retryable());
            assert!(!err.message().contains("evil"), "{err}");
        }
    }
}
