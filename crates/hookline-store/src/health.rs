//! What a subscriber's operators are told of it: the rules behind hookline's operational
//! events (`subscriber.failing`, `.recovered`, `.disabled`, `.revoked`) and the endpoint
//! lifecycle (`[lifecycle] disable_after`).
//!
//! Each subscriber's condition is read from its row ([`Condition::of`]); what its operators
//! were last told is kept beside it (`told`, `told_at`). A watcher compares the two and sends
//! the [`Notice`] the change calls for, then records the new condition only if what was told is
//! still what it read ([`Health::set_told`](crate::Health::set_told)), so two processes that
//! see one change tell it once: each notice's event id is made from the subscriber and the
//! time its condition began, and a second publish of an id is answered as a retry.

use hookline_policy::UnixMs;

use crate::{StatusReason, Subscriber, SubscriberStatus};

/// The subscriber hookline's operational events go to (the binary's `operational` module). It
/// is the platform's own, set rather than subscribed: its answers never revoke it (a 410 there
/// is a permanent failure, a dead letter to replay), since a revocation is final and would
/// leave no way to set it again.
pub const OPERATIONAL_ENDPOINT: &str = "hookline.operational";

/// Which subscribers `Health::auto_disable` pauses: active ones but `except`, failing
/// (`failing_after` failed attempts in a row or more, or the breaker open) since `cutoff` or
/// earlier, with no delivery delivered since.
#[derive(Debug, Clone)]
pub struct AutoDisable {
    pub cutoff: UnixMs,
    pub failing_after: u32,
    pub except: String,
    pub now: UnixMs,
}

/// A condition worth telling. A healthy subscriber has none (`None` where one is expected).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// Its breaker is open, or its last `failing_after` attempts or more failed.
    Failing,
    /// Paused by hookline after failing for `disable_after`.
    Disabled,
    /// Revoked (final).
    Revoked,
}

impl Condition {
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Failing => "failing",
            Condition::Disabled => "disabled",
            Condition::Revoked => "revoked",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Condition::Failing, Condition::Disabled, Condition::Revoked]
            .into_iter()
            .find(|c| c.as_str() == s)
    }

    /// `subscriber`'s condition, and when it began: a revoked one at its revocation (its last
    /// change: nothing changes a revoked subscriber), a failing or auto-disabled one at the
    /// start of its streak (which a change while paused leaves alone).
    pub fn of(subscriber: &Subscriber, failing_after: u32) -> Option<(Condition, UnixMs)> {
        match (subscriber.status, subscriber.status_reason) {
            (SubscriberStatus::Revoked, _) => Some((Condition::Revoked, subscriber.updated_at)),
            (SubscriberStatus::Paused, Some(StatusReason::AutoDisabled)) => Some((
                Condition::Disabled,
                subscriber.failing.since.unwrap_or(subscriber.updated_at),
            )),
            _ => {
                let since = subscriber.failing.since?;
                let failing = subscriber.breaker.open_until.is_some()
                    || subscriber.failing.attempts >= failing_after.max(1);
                failing.then_some((Condition::Failing, since))
            }
        }
    }
}

/// What a change of condition is told as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    Failing,
    Recovered,
    Disabled,
    Revoked,
}

impl Notice {
    /// The operational event's type.
    pub fn event_type(self) -> &'static str {
        match self {
            Notice::Failing => "subscriber.failing",
            Notice::Recovered => "subscriber.recovered",
            Notice::Disabled => "subscriber.disabled",
            Notice::Revoked => "subscriber.revoked",
        }
    }

    /// The notice for a subscriber last told `told` that is now `now`, if any. A revocation and
    /// an auto-disable are always told; failing only from health (a resumed subscriber still
    /// failing after being told it was disabled is not news); recovery from failing or
    /// disabled, which only a successful attempt ends (a resume keeps the streak).
    pub fn between(told: Option<Condition>, now: Option<Condition>) -> Option<Notice> {
        match (told, now) {
            (told, now) if told == now => None,
            (_, Some(Condition::Revoked)) => Some(Notice::Revoked),
            (_, Some(Condition::Disabled)) => Some(Notice::Disabled),
            (None, Some(Condition::Failing)) => Some(Notice::Failing),
            (Some(Condition::Failing | Condition::Disabled), None) => Some(Notice::Recovered),
            _ => None,
        }
    }
}

/// A subscriber the watcher looks at, with what was last told of it.
#[derive(Debug, Clone)]
pub struct Watched {
    pub subscriber: Subscriber,
    pub told: Option<Condition>,
    /// When the condition told of began (see [`Condition::of`]).
    pub told_at: Option<UnixMs>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookline_policy::{Breaker, FailingStreak};

    fn subscriber(status: SubscriberStatus, reason: Option<StatusReason>) -> Subscriber {
        Subscriber {
            id: "s".into(),
            tenant_id: None,
            url: "https://example.com/".into(),
            origin: crate::Origin::of_url("https://example.com/"),
            event_types: vec![],
            secret: String::new(),
            previous_secret: None,
            previous_secret_until: None,
            status,
            status_reason: reason,
            created_at: 0,
            updated_at: 7,
            breaker: Breaker::default(),
            failing: FailingStreak::default(),
            max_in_flight: None,
            rate_limit_per_second: None,
            rate_next_at: None,
            payload_version: None,
            headers: Default::default(),
        }
    }

    #[test]
    fn a_subscriber_fails_after_enough_failures_or_an_open_breaker() {
        let mut s = subscriber(SubscriberStatus::Active, None);
        assert_eq!(Condition::of(&s, 3), None);
        s.failing = FailingStreak {
            since: Some(5),
            attempts: 2,
        };
        assert_eq!(Condition::of(&s, 3), None);
        s.failing.attempts = 3;
        assert_eq!(Condition::of(&s, 3), Some((Condition::Failing, 5)));
        s.failing.attempts = 1;
        s.breaker.open_until = Some(100);
        assert_eq!(Condition::of(&s, 3), Some((Condition::Failing, 5)));
        // An operator's pause keeps what the streak says; hookline's own is `disabled`.
        s.status = SubscriberStatus::Paused;
        s.status_reason = Some(StatusReason::Paused);
        assert_eq!(Condition::of(&s, 3), Some((Condition::Failing, 5)));
        s.status_reason = Some(StatusReason::AutoDisabled);
        assert_eq!(Condition::of(&s, 3), Some((Condition::Disabled, 5)));
        s.status = SubscriberStatus::Revoked;
        s.status_reason = Some(StatusReason::Gone);
        assert_eq!(Condition::of(&s, 3), Some((Condition::Revoked, 7)));
    }

    #[test]
    fn each_change_is_told_once_and_only_news_is_told() {
        use Condition::*;
        let cases = [
            (None, None, None),
            (None, Some(Failing), Some(Notice::Failing)),
            (Some(Failing), Some(Failing), None),
            (Some(Failing), None, Some(Notice::Recovered)),
            (Some(Failing), Some(Disabled), Some(Notice::Disabled)),
            (None, Some(Disabled), Some(Notice::Disabled)),
            (Some(Disabled), None, Some(Notice::Recovered)),
            (Some(Disabled), Some(Failing), None),
            (Some(Failing), Some(Revoked), Some(Notice::Revoked)),
            (Some(Disabled), Some(Revoked), Some(Notice::Revoked)),
            (None, Some(Revoked), Some(Notice::Revoked)),
            (Some(Revoked), Some(Revoked), None),
        ];
        for (told, now, notice) in cases {
            assert_eq!(Notice::between(told, now), notice, "{told:?} -> {now:?}");
        }
    }
}
