//! `Retry-After` (RFC 9110, section 10.2.3): how long a subscriber asked us to wait, either as
//! delta-seconds or as an HTTP date. Parsed here, purely, with `now` as an argument, so the
//! decision that uses it stays reproducible.

use std::time::{Duration, UNIX_EPOCH};

use crate::{duration_ms, UnixMs};

/// The wait a `Retry-After` value asks for, measured from `now`. `None` for a value that is
/// neither delta-seconds nor an HTTP date; a date already past asks for no wait.
pub fn parse_retry_after(value: &str, now: UnixMs) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Absurdly long values saturate; the policy clamps them to max_delay anyway.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let at_ms = duration_ms(at.duration_since(UNIX_EPOCH).ok()?);
    Some(Duration::from_millis(
        u64::try_from(at_ms.saturating_sub(now)).unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Sun, 06 Nov 1994 08:49:37 GMT
    const T: i64 = 784_111_777_000;

    #[test]
    fn both_forms_and_garbage() {
        assert_eq!(parse_retry_after("120", T), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after(" 0 ", T), Some(Duration::ZERO));
        let in_a_minute = "Sun, 06 Nov 1994 08:50:37 GMT";
        assert_eq!(
            parse_retry_after(in_a_minute, T),
            Some(Duration::from_secs(60))
        );
        // The obsolete forms HTTP still requires recipients to accept.
        assert_eq!(
            parse_retry_after("Sunday, 06-Nov-94 08:50:37 GMT", T),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            parse_retry_after("Sun Nov  6 08:50:37 1994", T),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:48:37 GMT", T),
            Some(Duration::ZERO),
            "a date in the past asks for no wait"
        );
        for bad in ["", "-5", "1.5", "soon", "120s", "Sun, 06 Nov 1994"] {
            assert_eq!(parse_retry_after(bad, T), None, "{bad:?}");
        }
        assert_eq!(
            parse_retry_after("99999999999999999999999", T),
            Some(Duration::from_secs(u64::MAX))
        );
    }

    proptest! {
        #[test]
        fn delta_seconds_round_trip(secs in 0u64..10_000_000_000) {
            prop_assert_eq!(parse_retry_after(&secs.to_string(), T), Some(Duration::from_secs(secs)));
        }

        #[test]
        fn never_panics(value in ".{0,64}", now in any::<i64>()) {
            let _ = parse_retry_after(&value, now);
        }
    }
}
