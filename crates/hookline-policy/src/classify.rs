//! Classification comes before any delay arithmetic: exponential backoff cannot make a permanent
//! error temporary, so the first question about an attempt is whether retrying can plausibly help.

use std::collections::BTreeSet;

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
    pub const ALL: [Outcome; 4] = [
        Outcome::Success,
        Outcome::Retryable,
        Outcome::Permanent,
        Outcome::Lost,
    ];
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

/// A policy's table of answers: which statuses are worth retrying, and which end the
/// subscription itself. Every 2xx succeeds; every other status not listed is permanent (a final
/// answer from the subscriber, redirects included: they are never followed); timeouts, refused
/// or reset connections and DNS failures are always retryable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classification {
    retryable: BTreeSet<u16>,
    revoke: BTreeSet<u16>,
}

/// Why a table was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassificationError {
    /// Not an HTTP status a response can carry (100 to 599).
    #[error("{0} is not an HTTP status (100 to 599)")]
    NotAStatus(u16),
    /// A 2xx always succeeds.
    #[error("{0} is a success: every 2xx is delivered")]
    Success(u16),
    /// Listed as retryable and as revoking the subscription.
    #[error("{0} cannot be both retryable and revoke")]
    Both(u16),
}

/// Statuses that say "not now": a request timeout, too early, too many requests, and the
/// gateway and availability errors.
const RETRYABLE: [u16; 7] = [408, 425, 429, 500, 502, 503, 504];
/// 410 Gone means the subscription itself is over, not just this delivery.
const REVOKE: [u16; 1] = [410];

impl Default for Classification {
    fn default() -> Self {
        Self::new(RETRYABLE, REVOKE).expect("the standard table is valid")
    }
}

impl Classification {
    pub fn new(
        retryable: impl IntoIterator<Item = u16>,
        revoke: impl IntoIterator<Item = u16>,
    ) -> Result<Self, ClassificationError> {
        let retryable: BTreeSet<u16> = retryable.into_iter().collect();
        let revoke: BTreeSet<u16> = revoke.into_iter().collect();
        for &s in retryable.iter().chain(&revoke) {
            if !(100..600).contains(&s) {
                return Err(ClassificationError::NotAStatus(s));
            }
            if (200..300).contains(&s) {
                return Err(ClassificationError::Success(s));
            }
        }
        if let Some(&s) = retryable.intersection(&revoke).next() {
            return Err(ClassificationError::Both(s));
        }
        Ok(Self { retryable, revoke })
    }

    pub fn retryable(&self) -> &BTreeSet<u16> {
        &self.retryable
    }

    pub fn revoke(&self) -> &BTreeSet<u16> {
        &self.revoke
    }

    pub fn classify(&self, result: AttemptResult) -> Outcome {
        match result {
            AttemptResult::Status(s) if (200..300).contains(&s) => Outcome::Success,
            AttemptResult::Status(s) if self.retryable.contains(&s) => Outcome::Retryable,
            AttemptResult::Status(_) => Outcome::Permanent,
            AttemptResult::Timeout | AttemptResult::ConnectionFailed | AttemptResult::DnsFailed => {
                Outcome::Retryable
            }
            AttemptResult::Lost => Outcome::Lost,
            AttemptResult::Refused => Outcome::Permanent,
        }
    }

    /// Whether the answer ends the subscription (its other pending deliveries die too).
    pub fn revokes_subscription(&self, result: AttemptResult) -> bool {
        matches!(result, AttemptResult::Status(s) if self.revoke.contains(&s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_standard_table() {
        let standard = Classification::default();
        let classify = |r| standard.classify(r);
        let revokes_subscription = |r| standard.revokes_subscription(r);
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
        fn every_2xx_and_only_2xx_succeeds(
            s in 0u16..1000,
            retryable in prop::collection::vec(300u16..600, 0..10),
        ) {
            // Whatever a valid table lists.
            let table = Classification::new(retryable, []).unwrap();
            let ok = table.classify(AttemptResult::Status(s)) == Outcome::Success;
            prop_assert_eq!(ok, (200..300).contains(&s));
        }

        #[test]
        fn a_table_classifies_what_it_lists(
            retryable in prop::collection::btree_set(300u16..600, 0..10),
            s in 300u16..600,
        ) {
            let revoke: Vec<u16> = [410u16].into_iter().filter(|r| !retryable.contains(r)).collect();
            let table = Classification::new(retryable.clone(), revoke.clone()).unwrap();
            let outcome = table.classify(AttemptResult::Status(s));
            let expected = if retryable.contains(&s) { Outcome::Retryable } else { Outcome::Permanent };
            prop_assert_eq!(outcome, expected);
            prop_assert_eq!(table.revokes_subscription(AttemptResult::Status(s)), revoke.contains(&s));
        }
    }

    #[test]
    fn impossible_tables_are_refused() {
        use ClassificationError::*;
        assert_eq!(Classification::new([99], []), Err(NotAStatus(99)));
        assert_eq!(Classification::new([], [600]), Err(NotAStatus(600)));
        assert_eq!(Classification::new([204], []), Err(Success(204)));
        assert_eq!(Classification::new([520, 410], [410]), Err(Both(410)));
        let cloudflare = Classification::new((520..=524).chain(RETRYABLE), REVOKE).unwrap();
        assert_eq!(
            cloudflare.classify(AttemptResult::Status(522)),
            Outcome::Retryable
        );
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
