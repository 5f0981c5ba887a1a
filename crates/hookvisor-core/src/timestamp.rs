//! RFC 3339 times in UTC, as status.json and discobot's files write them.
//!
//! The calendar is jiff's. Its Temporal printer and parser are not used: they would add about
//! 275 KiB to the static init, which writes these times too, and the parser accepts more than
//! RFC 3339 (`+0200`, no seconds, `[zone]` annotations) while the file is shared with tools
//! that do not.

use std::time::SystemTime;

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::Offset;

/// Formats `t` as RFC 3339 in UTC to the second, the way discobot writes its times:
/// `2026-11-22T05:09:10Z`. Strings of this form sort in time order.
pub fn rfc3339(t: SystemTime) -> String {
    format!("{}Z", seconds(&utc(t)))
}

/// [`rfc3339`] with milliseconds, always three digits so the strings still sort in time
/// order: `2026-11-22T05:09:10.042Z`.
pub(crate) fn rfc3339_millis(t: SystemTime) -> String {
    let at = utc(t);
    format!(
        "{}.{:03}Z",
        seconds(&at),
        at.subsec_nanosecond() / 1_000_000
    )
}

/// Parses an RFC 3339 time (`2026-11-22T05:09:10Z`, optional fraction, `Z` or `±HH:MM`), as
/// written by hookvisor, discobot or any other tool sharing the file.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if !is_rfc3339_shape(b) {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i8> { s.get(range)?.parse().ok() };
    let year: i16 = s.get(0..4)?.parse().ok()?;
    let (month, day) = (num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &b[19..];
    let mut nanos: i32 = 0;
    if let [b'.', tail @ ..] = rest {
        let digits = tail.iter().take_while(|c| c.is_ascii_digit()).count();
        for (i, d) in tail[..digits].iter().enumerate().take(9) {
            nanos += i32::from(d - b'0') * 10i32.pow(8 - i as u32);
        }
        rest = &tail[digits..];
    }
    let offset_secs = match rest {
        [sign @ (b'+' | b'-'), ..] => {
            let (h, m): (i32, i32) = (
                s.get(s.len() - 5..s.len() - 3)?.parse().ok()?,
                s.get(s.len() - 2..)?.parse().ok()?,
            );
            if h > 23 || m > 59 {
                return None;
            }
            if *sign == b'+' {
                h * 3600 + m * 60
            } else {
                -(h * 3600 + m * 60)
            }
        }
        _ => 0,
    };
    // A leap second (:60) is the first second of the next minute, as a Unix clock counts it.
    let leap = second == 60;
    let civil = DateTime::new(
        year,
        month,
        day,
        hour,
        minute,
        if leap { 59 } else { second },
        nanos,
    )
    .ok()?;
    let mut at = Offset::from_seconds(offset_secs)
        .ok()?
        .to_timestamp(civil)
        .ok()?;
    if leap {
        at = at.checked_add(jiff::SignedDuration::from_secs(1)).ok()?;
    }
    SystemTime::try_from(at).ok()
}

/// `t` as a civil time in UTC; seconds are floored, so a time before 1970 falls in the second
/// it belongs to.
fn utc(t: SystemTime) -> DateTime {
    // SystemTime spans more than jiff's ±9999 years; such a clock is broken, and the nearest
    // representable time keeps the file readable.
    let at = Timestamp::try_from(t).unwrap_or_else(|_| {
        if t < SystemTime::UNIX_EPOCH {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        }
    });
    Offset::UTC.to_datetime(at)
}

/// `YYYY-MM-DDTHH:MM:SS`.
fn seconds(at: &DateTime) -> String {
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        at.year(),
        at.month(),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

/// `YYYY-MM-DD[Tt ]HH:MM:SS[.fraction](Z|z|±HH:MM)` with the digits where they belong.
fn is_rfc3339_shape(b: &[u8]) -> bool {
    let digits = |range: std::ops::Range<usize>| {
        b.get(range)
            .is_some_and(|part| part.iter().all(u8::is_ascii_digit))
    };
    if b.len() < 20
        || !(digits(0..4) && digits(5..7) && digits(8..10))
        || !(digits(11..13) && digits(14..16) && digits(17..19))
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return false;
    }
    let mut rest = &b[19..];
    if let [b'.', tail @ ..] = rest {
        let fraction = tail.iter().take_while(|c| c.is_ascii_digit()).count();
        if fraction == 0 {
            return false;
        }
        rest = &tail[fraction..];
    }
    match rest {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn rfc3339_formats_civil_dates() {
        // (seconds since the epoch, nanoseconds, rfc3339, rfc3339_millis)
        let table: [(i64, u32, &str, &str); 8] = [
            (0, 0, "1970-01-01T00:00:00Z", "1970-01-01T00:00:00.000Z"),
            (
                1_795_324_150,
                0,
                "2026-11-22T05:09:10Z",
                "2026-11-22T05:09:10.000Z",
            ),
            (
                1_795_324_150,
                42_999_999,
                "2026-11-22T05:09:10Z",
                "2026-11-22T05:09:10.042Z",
            ),
            (
                951_868_799,
                0,
                "2000-02-29T23:59:59Z",
                "2000-02-29T23:59:59.000Z",
            ),
            (
                951_868_800,
                0,
                "2000-03-01T00:00:00Z",
                "2000-03-01T00:00:00.000Z",
            ),
            (
                4_107_542_400,
                0,
                "2100-03-01T00:00:00Z",
                "2100-03-01T00:00:00.000Z",
            ),
            (-1, 0, "1969-12-31T23:59:59Z", "1969-12-31T23:59:59.000Z"),
            (
                -1,
                500_000_000,
                "1969-12-31T23:59:59Z",
                "1969-12-31T23:59:59.500Z",
            ),
        ];
        for (secs, nanos, plain, millis) in table {
            let t = if secs >= 0 {
                UNIX_EPOCH + Duration::new(secs as u64, nanos)
            } else {
                UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
                    + Duration::from_nanos(nanos.into())
            };
            assert_eq!(rfc3339(t), plain, "{secs}.{nanos}");
            assert_eq!(rfc3339_millis(t), millis, "{secs}.{nanos}");
            let parsed = parse_rfc3339(millis).unwrap();
            assert_eq!(rfc3339_millis(parsed), millis);
        }
    }

    #[test]
    fn parse_rfc3339_accepts_offsets_and_rejects_malformed_times() {
        let base = parse_rfc3339("2026-11-22T05:09:10Z").unwrap();
        assert_eq!(base, UNIX_EPOCH + Duration::from_secs(1_795_324_150));
        for same in [
            "2026-11-22T07:09:10+02:00",
            "2026-11-21T23:39:10-05:30",
            "2026-11-22t05:09:10z",
        ] {
            assert_eq!(parse_rfc3339(same), Some(base), "{same}");
        }
        assert_eq!(
            parse_rfc3339("2026-11-22T05:09:10.123456789Z"),
            Some(base + Duration::from_nanos(123_456_789))
        );
        for bad in [
            "",
            "2026-11-22",
            "2026-11-22T05:09:10",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-11-22T24:00:00Z",
            "2026-11-22T05:09:10.Z",
            "2026-11-22T05:09:10+0200",
            "2026-11-22T05:09:10Zjunk",
            "+026-11-22T05:09:10Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
        assert!(parse_rfc3339("2024-02-29T00:00:00Z").is_some());
    }
}
