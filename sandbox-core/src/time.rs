//! RFC 3339 timestamps, as provider APIs write them (`2026-08-20T10:00:00.123Z`,
//! `2023-11-08T02:52:30+01:00`): one parser and one formatter for every adapter, the kit and
//! the tools. No dependency: the civil-date arithmetic is Howard Hinnant's algorithm.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` (`t` or a space may replace `T`); `None`
/// for anything else, for dates before 1970 and for fractions finer than nanoseconds beyond
/// the ninth digit (which are ignored). Server text is never sliced inside a character.
///
/// ```
/// use sandbox_sdk_core::time::{format_rfc3339, parse_rfc3339};
/// let t = parse_rfc3339("2026-08-20T11:00:00.5+01:00").unwrap();
/// assert_eq!(format_rfc3339(t), "2026-08-20T10:00:00Z");
/// assert!(parse_rfc3339("yesterday").is_none());
/// ```
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(r)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut rest = text.get(19..)?;
    let mut nanos = 0u32;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        for (i, c) in frac.bytes().take(digits.min(9)).enumerate() {
            nanos += u32::from(c - b'0') * 10u32.pow(8 - i as u32);
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && rest.as_bytes()[3] == b':' => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (h, m) = (rest.get(1..3)?, rest.get(4..6)?);
            if !h.bytes().chain(m.bytes()).all(|c| c.is_ascii_digit()) {
                return None;
            }
            sign * (h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60)
        }
        _ => return None,
    };
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + min * 60 + sec - offset;
    UNIX_EPOCH.checked_add(Duration::new(u64::try_from(secs).ok()?, nanos))
}

/// Formats `time` as `YYYY-MM-DDTHH:MM:SSZ` (UTC, whole seconds; times before 1970 clamp to it).
pub fn format_rfc3339(time: SystemTime) -> String {
    let (date, _) = split(time);
    date
}

/// Formats `time` as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC, milliseconds), the form JavaScript's
/// `Date.toISOString` and many provider APIs write.
pub fn format_rfc3339_millis(time: SystemTime) -> String {
    let (date, nanos) = split(time);
    format!("{}.{:03}Z", date.trim_end_matches('Z'), nanos / 1_000_000)
}

/// The whole-second text and the nanoseconds of `time`.
fn split(time: SystemTime) -> (String, u32) {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    let text = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    );
    (text, since.subsec_nanos())
}

/// The proleptic Gregorian date of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn parses_every_precision_and_offset() {
        let base = at(1_767_225_600, 0); // 2026-01-01T00:00:00Z
        assert_eq!(parse_rfc3339("2026-01-01T00:00:00Z"), Some(base));
        assert_eq!(
            parse_rfc3339("2026-01-01T00:00:00.123456789Z"),
            Some(at(1_767_225_600, 123_456_789))
        );
        assert_eq!(
            parse_rfc3339("2026-01-01T00:00:00.1234567891234Z"),
            Some(at(1_767_225_600, 123_456_789))
        );
        assert_eq!(
            parse_rfc3339("2026-01-01 00:00:00.5z"),
            Some(at(1_767_225_600, 500_000_000))
        );
        assert_eq!(parse_rfc3339("2026-01-01T01:00:00+01:00"), Some(base));
        assert_eq!(parse_rfc3339("2025-12-31T23:00:00-01:00"), Some(base));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(UNIX_EPOCH));
    }

    #[test]
    fn formats_and_parses_back_across_leap_days_and_centuries() {
        for secs in [
            0u64,
            1_787_220_000,
            951_782_400,
            4_102_444_799,
            4_107_542_400,
        ] {
            let t = at(secs, 0);
            assert_eq!(parse_rfc3339(&format_rfc3339(t)), Some(t));
            let t = at(secs, 123_000_000);
            assert_eq!(parse_rfc3339(&format_rfc3339_millis(t)), Some(t));
        }
        assert_eq!(format_rfc3339(at(1_787_220_000, 9)), "2026-08-20T10:00:00Z");
        assert_eq!(
            format_rfc3339_millis(at(951_782_400, 42_000_000)),
            "2000-02-29T00:00:00.042Z"
        );
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        for s in [
            "",
            "yesterday",
            "2026-08-20",
            "2026-13-01T00:00:00Z",
            "2026-02-30T24:00:00Z",
            "2026-08-20T10:00:00",
            "2026-08-20T10:00:00.Z",
            "+026-08-20T10:00:00Z",
            "1969-12-31T23:59:59Z",
            "2026-08-20T10:00:00+1:000",
            "2026-08-20T10:00:00+-1:00",
            "2026-08-20T10:00:00\u{e9}1:23",
            "2026-08-20T10:00:00+0\u{e9}:1",
            "2026-08-20T10:00:00+\u{e9}:\u{e9}",
            "2026-08-20T1\u{e9}:00:00Z",
        ] {
            assert!(parse_rfc3339(s).is_none(), "{s}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_or_not_without_panicking(s in "\\PC{0,40}") {
            let _ = parse_rfc3339(&s);
        }

        #[test]
        fn every_millisecond_time_round_trips(ms in 0u64..8_000_000_000_000) {
            let t = UNIX_EPOCH + Duration::from_millis(ms);
            proptest::prop_assert_eq!(parse_rfc3339(&format_rfc3339_millis(t)), Some(t));
        }
    }
}
