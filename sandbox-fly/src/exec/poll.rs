//! One poll answer of a background process (what the launch and poll scripts print): whether it
//! is alive, its exit once recorded, its output sizes and the output from the offsets asked.

use super::process::{decode_b64, failure};
use super::scripts;
use crate::config::PROVIDER;
use crate::wire::ExecResponse;
use bytes::Bytes;
use sandbox_sdk_core::{Error, ErrorKind, ExitStatus, Result};

/// One parsed poll answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PollAnswer {
    pub alive: bool,
    pub exit: Option<ExitStatus>,
    pub out_size: u64,
    pub err_size: u64,
    pub stdout: Bytes,
    pub stderr: Bytes,
}

/// Parses `sandbox-fly-poll ALIVE EXIT OUT ERR [OUTFORM ERRFORM]`, stdout, a `.` line, stderr.
/// Each stream comes in base64 unless its form is `raw`: then it is the whole stream as it is
/// (the script sends that only for a stream of printable ASCII and newlines whose every byte it
/// read back, from offset 0), exactly its size in bytes, followed by a newline.
pub(crate) fn parse_poll(text: &str) -> Option<PollAnswer> {
    let start = text.find(scripts::POLL_TAG)?;
    let text = &text[start..];
    let (header, rest) = text.split_once('\n').unwrap_or((text, ""));
    let mut fields = header.split_whitespace().skip(1);
    let alive = fields.next()? == "1";
    let exit = match fields.next()? {
        "-" => None,
        s if s.starts_with('s') => Some(ExitStatus::signal(s[1..].parse().ok()?)),
        s => Some(ExitStatus::code(s.parse().ok()?)),
    };
    let out_size = fields.next()?.parse().ok()?;
    let err_size = fields.next()?.parse().ok()?;
    let raw_out = fields.next() == Some("raw");
    let raw_err = fields.next() == Some("raw");
    let (stdout, err) = if raw_out {
        let (out, rest) = split_raw(rest, out_size)?;
        (out, rest.strip_prefix(".\n").or(rest.strip_prefix('.'))?)
    } else {
        let (out, err) = match rest.strip_prefix(".\n") {
            Some(err) => ("", err),
            None => match rest.split_once("\n.\n") {
                Some((out, err)) => (out, err),
                None => rest.split_once(".\n").or_else(|| rest.split_once('.'))?,
            },
        };
        let out = if out.trim() == "." { "" } else { out };
        (decode_b64(out)?, err)
    };
    let stderr = if raw_err {
        split_raw(err, err_size)?.0
    } else {
        decode_b64(err)?
    };
    Some(PollAnswer {
        alive,
        exit,
        out_size,
        err_size,
        stdout,
        stderr,
    })
}

/// The first `size` bytes of `text` (a raw stream) and what follows its closing newline.
fn split_raw(text: &str, size: u64) -> Option<(Bytes, &str)> {
    let size = usize::try_from(size).ok()?;
    let stream = text.get(..size)?;
    let rest = &text[size..];
    Some((
        Bytes::copy_from_slice(stream.as_bytes()),
        rest.strip_prefix('\n').unwrap_or(rest),
    ))
}

/// A launch or poll script's answer: the parsed poll, or the script's failure.
pub(super) fn poll_result(resp: ExecResponse, machine: &str, pid: &str) -> Result<PollAnswer> {
    if resp.exit_code.unwrap_or(0) != 0 {
        return Err(failure(
            resp,
            "exec",
            machine,
            &format!("background process {pid}"),
        ));
    }
    parse_poll(resp.stdout.as_deref().unwrap_or("")).ok_or_else(|| {
        Error::new(
            ErrorKind::Provider,
            format!("unreadable poll answer for background process {pid}"),
        )
        .with_provider(PROVIDER)
        .with_operation("exec")
        .with_sandbox_id(machine)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::process::b64;
    use base64::Engine;

    #[test]
    fn poll_answers_parse_with_and_without_output() {
        let text = "sandbox-fly-poll 0 3 5 4\naGVsbG8=\n.\nb29wcw==\n";
        let a = parse_poll(text).unwrap();
        assert!(!a.alive);
        assert_eq!(a.exit, Some(ExitStatus::code(3)));
        assert_eq!((a.out_size, a.err_size), (5, 4));
        assert_eq!(&a.stdout[..], b"hello");
        assert_eq!(&a.stderr[..], b"oops");
        let a = parse_poll("sandbox-fly-poll 1 - 0 0\n.\n").unwrap();
        assert!(a.alive && a.exit.is_none() && a.stdout.is_empty() && a.stderr.is_empty());
        let a = parse_poll("sandbox-fly-poll 0 s9 0 0\n.\n").unwrap();
        assert_eq!(a.exit, Some(ExitStatus::signal(9)));
        assert!(parse_poll("garbage").is_none());
        // Raw streams: exactly their size, even when they hold `.` lines or the tag.
        let a = parse_poll("sandbox-fly-poll 0 0 9 5 raw raw\nx\n.\nsandb\n.\na\n.\nb\n").unwrap();
        assert_eq!(
            (&a.stdout[..], &a.stderr[..]),
            (&b"x\n.\nsandb"[..], &b"a\n.\nb"[..])
        );
        let a = parse_poll("sandbox-fly-poll 0 0 3 4 raw b64\nhi\n\n.\nb29wcw==\n").unwrap();
        assert_eq!((&a.stdout[..], &a.stderr[..]), (&b"hi\n"[..], &b"oops"[..]));
        let a = parse_poll("sandbox-fly-poll 0 0 0 5 b64 raw\n.\na\n.\nb\n").unwrap();
        assert_eq!((&a.stdout[..], &a.stderr[..]), (&b""[..], &b"a\n.\nb"[..]));
        // A raw stream shorter than its size, or cut inside a character, is unreadable.
        assert!(parse_poll("sandbox-fly-poll 0 0 9 0 raw b64\nhi\n.\n").is_none());
        assert!(parse_poll("sandbox-fly-poll 0 0 1 0 raw b64\n\u{e9}\n.\n").is_none());
        assert!(parse_poll("sandbox-fly-poll 1 x 0 0\n.\n").is_none());
    }

    #[test]
    fn base64_wrapped_at_76_columns_decodes() {
        let data = vec![7u8; 200];
        let encoded = b64().encode(&data);
        let wrapped: Vec<String> = encoded
            .as_bytes()
            .chunks(76)
            .map(|c| String::from_utf8(c.to_vec()).unwrap())
            .collect();
        let text = format!("sandbox-fly-poll 1 - 200 0\n{}\n.\n", wrapped.join("\n"));
        assert_eq!(parse_poll(&text).unwrap().stdout.len(), 200);
    }
}
