//! Classification comes before any delay arithmetic: exponential backoff cannot make a permanent
//! error temporary, so the first question about an attempt is whether retrying can plausibly help.

/// What one HTTP attempt produced, as far as the retry decision cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptResult {
    /// The destination answered with this status code.
    Status(u16),
    /// No answer within the attempt timeout.
    Timeout,
    /// The connection was refused, reset or dropped before a response arrived.
    ConnectionFailed,
    /// The destination's host name did not resolve.
    DnsFailed,
    /// The destination was refused before any connection (for example by the SSRF guard, or an
    /// unusable URL): no retry can change that.
    Refused,
    /// The attempt's outcome is unknown because the worker that made it was lost (its lease ran
    /// out). It may have reached the subscriber; retrying is safe because the webhook-id is stable.
    Lost,
}

/// The ways an attempt can end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    Success,
    Retryable,
    Permanent,
    /// The worker was lost (crashed, killed) before it recorded an outcome. The attempt counts
    /// against the budget and is retried like a retryable failure, but it says nothing about
    /// the subscriber, so it neither opens nor closes the breaker.
    Lost,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Retryable => "retryable",
            Outcome::Permanent => "permanent",
            Outcome::Lost => "lost",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "success" => Outcome::Success,
            "retryable" => Outcome::Retryable,
            "permanent" => Outcome::Permanent,
            "lost" => Outcome::Lost,
            _ => return None,
        })
    }
}

/// 2xx succeeds. Statuses that say "not now" (408, 425, 429, 5xx gateway and availability
/// errors) and transport failures are retryable. Everything else, including redirects (which
/// are never followed) and 410 Gone, is a final answer from the subscriber.
pub fn classify(result: AttemptResult) -> Outcome {
    match result {
        AttemptResult::Status(s) if (200..300).contains(&s) => Outcome::Success,
        AttemptResult::Status(408 | 425 | 429 | 500 | 502 | 503 | 504) => Outcome::Retryable,
        AttemptResult::Status(_) => Outcome::Permanent,
        AttemptResult::Timeout | AttemptResult::ConnectionFailed | AttemptResult::DnsFailed => {
            Outcome::Retryable
        }
        AttemptResult::Lost => Outcome::Lost,
        AttemptResult::Refused => Outcome::Permanent,
    }
}

/// 410 Gone means the subscription itself is over, not just this delivery.
pub fn revokes_subscription(result: AttemptResult) -> bool {
    result == AttemptResult::Status(410)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_issue_table() {
        for s in [200, 201, 204, 299] {
            assert_eq!(classify(AttemptResult::Status(s)), Outcome::Success, "{s}");
        }
        for s in [408, 425, 429, 500, 502, 503, 504] {
            assert_eq!(
                classify(AttemptResult::Status(s)),
                Outcome::Retryable,
                "{s}"
            );
        }
        for s in [
            100, 301, 302, 304, 307, 400, 401, 403, 404, 410, 413, 422, 501, 505,
        ] {
            assert_eq!(
                classify(AttemptResult::Status(s)),
                Outcome::Permanent,
                "{s}"
            );
        }
        for r in [
            AttemptResult::Timeout,
            AttemptResult::ConnectionFailed,
            AttemptResult::DnsFailed,
        ] {
            assert_eq!(classify(r), Outcome::Retryable, "{r:?}");
        }
        assert_eq!(classify(AttemptResult::Lost), Outcome::Lost);
        assert_eq!(classify(AttemptResult::Refused), Outcome::Permanent);
        assert!(revokes_subscription(AttemptResult::Status(410)));
        assert!(!revokes_subscription(AttemptResult::Status(404)));
    }

    proptest! {
        #[test]
        fn every_2xx_and_only_2xx_succeeds(s in 0u16..1000) {
            let ok = classify(AttemptResult::Status(s)) == Outcome::Success;
            prop_assert_eq!(ok, (200..300).contains(&s));
        }
    }

    #[test]
    fn outcome_names_round_trip() {
        for o in [
            Outcome::Success,
            Outcome::Retryable,
            Outcome::Permanent,
            Outcome::Lost,
        ] {
            assert_eq!(Outcome::parse(o.as_str()), Some(o));
        }
        assert_eq!(Outcome::parse("maybe"), None);
    }
}
