//! Tenants' rules, the same on every backend: what a change may be, what a quota refuses, and
//! the publish limiter's arithmetic. Pure: the backends read and write the rows around them.

use hookline_policy::UnixMs;

use crate::*;

/// Whether a tenant limited to `per_second` publishes may publish at `now` (milliseconds), given
/// its limiter's theoretical arrival time `tat_us` (microseconds; `None` before its first
/// publish). The generic cell rate algorithm: each publish moves the time one interval
/// further; a second's worth (the whole publishes in `per_second`, at least one) may come at
/// once, and a publish past that waits.
/// Answers the new time to store, or how many milliseconds until a publish would be admitted.
pub(crate) fn admit_publish(tat_us: Option<i64>, now: UnixMs, per_second: f64) -> Result<i64, i64> {
    let now_us = now.saturating_mul(1000);
    // At least a microsecond; an infinite one (a rate of 0, never stored) saturates.
    let interval_us = paced((1_000_000.0 / per_second).ceil()).max(1);
    let tat_us = tat_us.unwrap_or(now_us).max(now_us);
    let ahead_us = tat_us.saturating_sub(now_us);
    let burst = per_second.floor().max(1.0);
    // Whole publishes, far below i64::MAX (rates are at most 100,000 a second).
    #[allow(clippy::cast_possible_truncation)]
    let tolerance_us = interval_us.saturating_mul(burst as i64 - 1);
    if ahead_us > tolerance_us {
        let wait_us = ahead_us - tolerance_us;
        // Rounded up: a client waiting that long is admitted.
        Err(wait_us.saturating_add(999) / 1000)
    } else {
        Ok(tat_us.saturating_add(interval_us))
    }
}

/// The refusal of a publish the limiter did not admit.
pub(crate) fn rate_limited(tenant: &str, per_second: f64, retry_after_ms: i64) -> StoreError {
    StoreError::RateLimited {
        tenant: tenant.to_owned(),
        per_second,
        retry_after_ms,
    }
}

/// The refusal of a subscriber one past the tenant's quota.
pub(crate) fn over_subscriber_quota(tenant: &str, max: u32) -> StoreError {
    StoreError::OverQuota(format!(
        "tenant {tenant:?} has its max_subscribers of {max} subscribers (revoked ones do not \
         count); raise the quota or delete one"
    ))
}

/// What a subscriber or an event names as its tenant when there is none to belong to.
pub(crate) fn unknown_tenant(tenant: &str) -> StoreError {
    StoreError::Invalid(format!("tenant_id: no tenant {tenant:?}"))
}

pub(crate) fn tenant_id_taken(tenant: &str) -> StoreError {
    StoreError::Conflict(format!(
        "tenant {tenant:?} exists or existed: tenant ids are not reused"
    ))
}

/// The tenant after `patch`, at `now`.
pub(crate) fn patched_tenant(current: Tenant, patch: TenantPatch, now: UnixMs) -> Result<Tenant> {
    let next = Tenant {
        name: patch.name.unwrap_or(current.name),
        max_subscribers: patch.max_subscribers.unwrap_or(current.max_subscribers),
        max_events_per_second: patch
            .max_events_per_second
            .unwrap_or(current.max_events_per_second),
        updated_at: now,
        ..current
    };
    check_limits(next.max_events_per_second)?;
    Ok(next)
}

/// Refuses a rate the limiter cannot keep.
pub(crate) fn check_limits(max_events_per_second: Option<f64>) -> Result<()> {
    if let Some(rate) = max_events_per_second {
        check_rate("max_events_per_second", rate)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs publishes at `times` (ms, ascending) through the limiter; answers which were admitted.
    fn run(per_second: f64, times: &[i64]) -> Vec<bool> {
        let mut tat = None;
        times
            .iter()
            .map(|&now| match admit_publish(tat, now, per_second) {
                Ok(next) => {
                    tat = Some(next);
                    true
                }
                Err(_) => false,
            })
            .collect()
    }

    #[test]
    fn a_second_s_worth_comes_at_once_then_the_rate() {
        // 10 per second: 10 at once, the 11th waits 100 ms.
        let admitted = run(10.0, &[0; 11]);
        assert_eq!(admitted.iter().filter(|a| **a).count(), 10);
        let tat = (0..10).fold(None, |tat, _| admit_publish(tat, 0, 10.0).ok());
        assert_eq!(admit_publish(tat, 0, 10.0), Err(100));
        assert!(admit_publish(tat, 100, 10.0).is_ok());
    }

    #[test]
    fn a_second_s_worth_is_every_whole_publish_of_the_rate() {
        for (per_second, burst) in [(3.0, 3), (7.0, 7), (2.5, 2), (0.5, 1), (1.0, 1)] {
            let admitted = run(per_second, &[0; 20]);
            assert_eq!(
                admitted.iter().filter(|a| **a).count(),
                burst,
                "{per_second}/s"
            );
        }
    }

    #[test]
    fn a_slow_rate_admits_one_then_waits_the_interval() {
        let first = admit_publish(None, 0, 0.5).unwrap();
        assert_eq!(admit_publish(Some(first), 0, 0.5), Err(2_000));
        assert_eq!(admit_publish(Some(first), 1_999, 0.5), Err(1));
        assert!(admit_publish(Some(first), 2_000, 0.5).is_ok());
    }

    proptest! {
        /// Over any span, no more are admitted than the rate allows in it plus a second's worth;
        /// and a publish told to wait is admitted once it has.
        #[test]
        fn the_limiter_holds_its_rate(
            per_second in 0.01f64..5_000.0,
            gaps in proptest::collection::vec(0i64..2_000, 1..400),
        ) {
            let times: Vec<i64> = gaps
                .iter()
                .scan(0i64, |t, g| { *t += g; Some(*t) })
                .collect();
            let admitted = run(per_second, &times);
            let span_s = (times[times.len() - 1] - times[0]) as f64 / 1000.0;
            let allowed = per_second * span_s + per_second.max(1.0) + 1.0;
            let n = admitted.iter().filter(|a| **a).count() as f64;
            prop_assert!(n <= allowed, "{n} admitted, at most {allowed}");

            let mut tat = None;
            for &now in &times {
                match admit_publish(tat, now, per_second) {
                    Ok(next) => tat = Some(next),
                    Err(wait) => {
                        prop_assert!(wait > 0);
                        prop_assert!(admit_publish(tat, now + wait, per_second).is_ok());
                    }
                }
            }
        }
    }
}
