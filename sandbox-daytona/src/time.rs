//! RFC 3339 timestamps as the API writes them (`2026-08-20T10:00:00.000Z`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`; `None` for anything else.
pub(crate) fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { text.get(r)?.parse().ok() };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if b[13] != b':' || b[16] != b':' || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    if hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut nanos: u32 = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let mut value = 0u32;
        for (i, c) in frac[..digits].bytes().take(9).enumerate() {
            value += u32::from(c - b'0') * 10u32.pow(8 - i as u32);
        }
        nanos = value;
        rest = &frac[digits..];
    }
    let offset_secs: i64 = match rest {
        "Z" | "z" => 0,
        // Byte checks and `get`: the text is server data, and slicing inside a multi-byte
        // character would panic.
        _ if rest.len() == 6
            && matches!(rest.as_bytes()[0], b'+' | b'-')
            && rest.as_bytes()[3] == b':' =>
        {
            let h: i64 = rest.get(1..3)?.parse().ok()?;
            let m: i64 = rest.get(4..6)?.parse().ok()?;
            let s = h * 3600 + m * 60;
            if rest.starts_with('-') { -s } else { s }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec - offset_secs;
    if secs < 0 {
        return None;
    }
    Some(UNIX_EPOCH + Duration::new(secs as u64, nanos))
}

/// Formats a time as `YYYY-MM-DDTHH:MM:SSZ` (UTC, whole seconds; times before 1970 clamp to it).
/// `now + wait`, saturating far in the future instead of panicking on a huge `wait` (callers
/// pass `Duration::MAX` to mean "no deadline").
pub(crate) fn instant_after(wait: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(wait)
        .or_else(|| now.checked_add(FAR))
        .unwrap_or(now)
}

/// The pauses of a state wait that ends at `deadline`: the caller checks at once, then pauses
/// 25 ms doubling up to `max` (the builder's poll interval), the last pause ending at the
/// deadline (`sandbox_sdk_core::wait::Backoff`).
pub(crate) fn backoff_until(
    max: Duration,
    deadline: tokio::time::Instant,
) -> sandbox_sdk_core::wait::Backoff {
    sandbox_sdk_core::wait::Backoff::new(max)
        .within(deadline.saturating_duration_since(tokio::time::Instant::now()))
}

/// `SystemTime::now() + wait`, or `None` when that is not representable.
pub(crate) fn system_time_after(wait: Duration) -> Option<SystemTime> {
    SystemTime::now().checked_add(wait)
}

/// About thirty years: "never" for a deadline.
const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);

pub(crate) fn format_rfc3339(time: SystemTime) -> String {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_api_format() {
        let t = parse_rfc3339("2026-08-20T10:00:00.000Z").unwrap();
        assert_eq!(
            t.duration_since(UNIX_EPOCH).unwrap().as_secs(),
            1_787_220_000
        );
        let t = parse_rfc3339("1970-01-01T00:00:01.5Z").unwrap();
        assert_eq!(
            t.duration_since(UNIX_EPOCH).unwrap(),
            Duration::from_millis(1500)
        );
        let t = parse_rfc3339("1970-01-01T01:00:00+01:00").unwrap();
        assert_eq!(t, UNIX_EPOCH);
    }

    #[test]
    fn formats_and_parses_back() {
        for secs in [
            0u64,
            1_787_220_000,
            951_782_400, /* 2000-02-29 */
            4_102_444_799,
        ] {
            let t = UNIX_EPOCH + Duration::from_secs(secs);
            let text = format_rfc3339(t);
            assert_eq!(parse_rfc3339(&text), Some(t), "{text}");
        }
        assert_eq!(
            format_rfc3339(UNIX_EPOCH + Duration::from_secs(1_787_220_000)),
            "2026-08-20T10:00:00Z"
        );
    }

    #[test]
    fn rejects_garbage() {
        for s in [
            "",
            "2026-08-20",
            "2026-13-01T00:00:00Z",
            "2026-08-20T10:00:00",
            "x026-08-20T10:00:00Z",
            // Six bytes of offset with a multi-byte character: rejected, not a panic.
            "2026-08-20T10:00:00\u{e9}1:23",
            "2026-08-20T10:00:00+0\u{e9}:1",
            "2026-08-20T10:00:00+\u{e9}:\u{e9}",
        ] {
            assert!(parse_rfc3339(s).is_none(), "{s}");
        }
    }
}
