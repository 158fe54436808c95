//! Time as a dependency. Every time that is recorded or scheduled (an event's acceptance, an
//! attempt's start, `run_at`, a window, a lease, a breaker's cool-down) is read, and waited
//! for, only through [`Clock`], so tests move time forward instead of sleeping through a retry
//! delay. How long I/O in progress has taken (an attempt's duration and its slowness, the HTTP
//! server's read deadlines, a health probe's timeout) is measured on the monotonic timer
//! instead: it is about the process and its sockets, not the schedule, and a test's frozen
//! clock must not make an attempt look instant.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hookline_policy::{duration_ms, UnixMs};

pub type SleepFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> UnixMs;
    /// Completes once `now_ms() >= deadline`.
    fn sleep_until(&self, deadline: UnixMs) -> SleepFuture;
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> UnixMs {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, duration_ms)
    }

    fn sleep_until(&self, deadline: UnixMs) -> SleepFuture {
        let wait = u64::try_from(deadline.saturating_sub(self.now_ms())).unwrap_or(0);
        Box::pin(tokio::time::sleep(Duration::from_millis(wait)))
    }
}

/// For tests (feature `testing`); a service runs on [`SystemClock`].
#[cfg(any(test, feature = "testing"))]
pub use manual::ManualClock;

#[cfg(any(test, feature = "testing"))]
mod manual {
    use std::sync::Arc;
    use std::time::Duration;

    use hookline_policy::{duration_ms, UnixMs};
    use tokio::sync::watch;

    use super::{Clock, SleepFuture};

    /// A clock that moves only when told to. Sleepers wake when it is advanced past their
    /// deadline.
    #[derive(Debug, Clone)]
    pub struct ManualClock {
        now: Arc<watch::Sender<UnixMs>>,
    }

    impl ManualClock {
        pub fn new(start: UnixMs) -> Self {
            Self {
                now: Arc::new(watch::channel(start).0),
            }
        }

        pub fn advance(&self, by: Duration) {
            self.now
                .send_modify(|t| *t = t.saturating_add(duration_ms(by)));
        }

        pub fn set(&self, to: UnixMs) {
            self.now.send_modify(|t| *t = (*t).max(to));
        }
    }

    impl Clock for ManualClock {
        fn now_ms(&self) -> UnixMs {
            *self.now.borrow()
        }

        fn sleep_until(&self, deadline: UnixMs) -> SleepFuture {
            let mut rx = self.now.subscribe();
            Box::pin(async move {
                let _ = rx.wait_for(|now| *now >= deadline).await;
            })
        }
    }
}

/// RFC 3339 with milliseconds, UTC: the one way hookline writes times in JSON and tables.
pub fn rfc3339(ms: UnixMs) -> String {
    /// 9999-12-31T23:59:59.999Z: RFC 3339 has four-digit years.
    const LATEST: UnixMs = 253_402_300_799_999;
    let t = UNIX_EPOCH + Duration::from_millis(ms.clamp(0, LATEST).cast_unsigned());
    humantime::format_rfc3339_millis(t).to_string()
}

/// A time written as [`rfc3339`] writes it (UTC, `Z`; the fraction optional), as milliseconds.
pub fn parse_rfc3339(text: &str) -> Option<UnixMs> {
    let t = humantime::parse_rfc3339(text).ok()?;
    let ms = t.duration_since(UNIX_EPOCH).ok()?.as_millis();
    UnixMs::try_from(ms).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_back_as_written() {
        for ms in [0, 1_786_784_400_123, 253_402_300_799_999] {
            assert_eq!(parse_rfc3339(&rfc3339(ms)), Some(ms));
        }
        assert_eq!(
            parse_rfc3339("2026-08-15T09:00:00Z"),
            Some(1_786_784_400_000)
        );
        for bad in ["", "yesterday", "2026-08-15", "2026-08-15T09:00:00+02:00"] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn times_outside_four_digit_years_are_written_at_the_edge() {
        assert_eq!(rfc3339(-5), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(i64::MAX), "9999-12-31T23:59:59.999Z");
    }

    #[tokio::test]
    async fn a_manual_sleeper_wakes_when_time_passes_its_deadline() {
        let clock = ManualClock::new(1_000);
        let sleeper = tokio::spawn(clock.sleep_until(3_000));
        clock.advance(Duration::from_millis(1_000));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        clock.advance(Duration::from_millis(1_000));
        sleeper.await.unwrap();
        assert_eq!(clock.now_ms(), 3_000);
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339(1_786_784_400_123), "2026-08-15T09:00:00.123Z");
    }
}
