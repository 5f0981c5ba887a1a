//! RFC 3339 times in UTC, as status.json and discobot's files write them.
//!
//! The calendar is jiff's; this module only fixes the two shapes we write (strings that sort in
//! time order) and keeps parsing to strict RFC 3339, which jiff's Temporal parser widens.

use std::time::SystemTime;

use jiff::Timestamp;
use jiff::fmt::temporal::DateTimePrinter;

/// Formats `t` as RFC 3339 in UTC to the second, the way discobot writes its times:
/// `2026-11-22T05:09:10Z`. Strings of this form sort in time order.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    print(t, 0)
}

/// [`rfc3339`] with milliseconds, always three digits so the strings still sort in time
/// order: `2026-11-22T05:09:10.042Z`.
pub(crate) fn rfc3339_millis(t: SystemTime) -> String {
    print(t, 3)
}

/// Parses an RFC 3339 time (`2026-11-22T05:09:10Z`, optional fraction, `Z` or `±HH:MM`), as
/// written by [`rfc3339`], discobot or any other tool sharing the file.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    // jiff also takes ISO 8601 forms other tools would not read back (`+0200`, no seconds,
    // `[zone]` annotations); the file is shared, so only RFC 3339 itself is accepted.
    if !is_rfc3339_shape(s.as_bytes()) {
        return None;
    }
    let at: Timestamp = s.parse().ok()?;
    SystemTime::try_from(at).ok()
}

/// Prints `t` in UTC with `digits` fractional digits, truncated: the civil time's seconds are
/// floored, so times before 1970 print as the second they fall in.
fn print(t: SystemTime, digits: u8) -> String {
    // SystemTime spans more than jiff's ±9999 years; such a clock is broken, and the nearest
    // representable time keeps the file readable.
    let at = Timestamp::try_from(t).unwrap_or_else(|_| {
        if t < SystemTime::UNIX_EPOCH {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        }
    });
    DateTimePrinter::new()
        .precision(Some(digits))
        .timestamp_to_string(&at)
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
