//! What the capacity model reads: the backlog, what waits, meters, attempt history.

use super::*;

pub(crate) async fn attempt_history_reads_the_recent_attempts(h: &impl Harness) {
    let store = h.open().await;
    store.create_subscriber(sub("a", &[]), T0).await.unwrap();
    for i in 0..4 {
        accepted(&*store, event(&format!("e{i}"), "t"), T0).await;
    }
    assert_eq!(
        store.attempt_history(T0, 100).await.unwrap(),
        AttemptHistory::default()
    );
    let claimed = store.claim_due(claim(T0, 10, 10)).await.unwrap();
    // Answered in 40 ms and 7 ms (a success and a 503), a timeout, and an old success.
    let mut done: Vec<Completion> = Vec::new();
    for (i, c) in claimed.iter().enumerate() {
        let (transition, status, duration_ms, started_at) = match i {
            0 => (Transition::Delivered, Some(200), 40, T0 + 10),
            1 => (
                Transition::Reschedule { run_at: T0 + 9_000 },
                Some(503),
                7,
                T0 + 11,
            ),
            2 => (
                Transition::Reschedule { run_at: T0 + 9_000 },
                None,
                10_000,
                T0 + 12,
            ),
            _ => (Transition::Delivered, Some(200), 1, T0 - 1),
        };
        let mut completion = completion(c, transition, T0 + 20);
        completion.record.status = status;
        completion.record.duration_ms = duration_ms;
        completion.record.started_at = started_at;
        done.push(completion);
    }
    store.complete(done, T0 + 20).await.unwrap();
    let h = store.attempt_history(T0, 100).await.unwrap();
    assert_eq!(
        h,
        AttemptHistory {
            attempts: 3,
            answered_ms: vec![7, 40],
            failed: 2,
            unanswered: 1,
        }
    );
    // The most recent first: a limit of one reads the timeout.
    let h = store.attempt_history(T0, 1).await.unwrap();
    assert_eq!((h.attempts, h.unanswered), (1, 1));
}

pub(crate) async fn backlog_waits_group_what_waits_for_a_time_or_a_rate(h: &impl Harness) {
    let store = h.open().await;
    store
        .create_subscriber(sub("a", &["ta"]), T0)
        .await
        .unwrap();
    store
        .create_subscriber(sub("b", &["tb"]), T0)
        .await
        .unwrap();
    let limited = NewSubscriber {
        rate_limit_per_second: Some(2.0),
        ..sub("c", &["tc"])
    };
    store.create_subscriber(limited, T0).await.unwrap();
    store
        .create_subscriber(sub("d", &["tb"]), T0)
        .await
        .unwrap();
    store
        .update_subscriber(
            "d",
            SubscriberPatch {
                status: Some(SubscriberStatus::Paused),
                ..SubscriberPatch::default()
            },
            T0,
        )
        .await
        .unwrap();
    assert_eq!(
        store.backlog_waits(T0).await.unwrap(),
        BacklogWaits::default()
    );
    for i in 0..8 {
        accepted(&*store, event(&format!("a{i}"), "ta"), T0).await;
    }
    for i in 0..2 {
        accepted(&*store, event(&format!("b{i}"), "tb"), T0).await;
    }
    for i in 0..4 {
        accepted(&*store, event(&format!("c{i}"), "tc"), T0).await;
    }
    // a: five failures open its breaker; their retries (at 10 s) and its three due rows
    // all wait for the cool-down. b: two retries in 90 s. c: four at 2/s. d: paused, held.
    let claimed = store
        .claim_due(ClaimRequest {
            exclude_subscribers: vec!["c".into()],
            ..claim(T0, 100, 5)
        })
        .await
        .unwrap();
    let retry = |c: &ClaimedDelivery| {
        let run_at = if c.destination.subscriber_id == "a" {
            T0 + 10_000
        } else {
            T0 + 90_000
        };
        completion(c, Transition::Reschedule { run_at }, T0 + 1)
    };
    let failed = claimed.iter().map(retry).collect();
    store.complete(failed, T0 + 1).await.unwrap();
    let open_until = store
        .get_subscriber("a")
        .await
        .unwrap()
        .breaker
        .open_until
        .unwrap();
    let now = T0 + 2;
    let waits = store.backlog_waits(now).await.unwrap();
    let mut groups = waits.deferred.clone();
    groups.sort_by_key(|g| g.after_ms);
    // Within a minute, rounded up to the second; 90 s, to ten seconds.
    let breaker_after = u64::try_from(open_until - now).unwrap().div_ceil(1_000) * 1_000;
    assert_eq!(
        groups,
        [
            Deferred {
                cause: DeferCause::OpenBreaker,
                after_ms: breaker_after,
                deliveries: 8,
            },
            Deferred {
                cause: DeferCause::Retry,
                after_ms: 90_000,
                deliveries: 2,
            },
        ]
    );
    // Four of c's at 2/s: two seconds from now.
    assert_eq!(
        (waits.rate_limited, waits.rate_limited_longest_ms),
        (4, 2_000)
    );
    // A claim defers a's due rows to its half-open time (a millisecond apart): they still
    // wait on the breaker, not on a retry.
    let none = store
        .claim_due(ClaimRequest {
            exclude_subscribers: vec!["c".into()],
            ..claim(now, 100, 5)
        })
        .await
        .unwrap();
    assert!(none.is_empty());
    let deferred = store.backlog_waits(now).await.unwrap();
    let behind_breaker: u64 = deferred
        .deferred
        .iter()
        .filter(|g| g.cause == DeferCause::OpenBreaker)
        .map(|g| g.deliveries)
        .sum();
    assert_eq!(behind_breaker, 8, "{deferred:?}");
    // Past the cool-down, a's rows wait for nothing: they are due.
    let later = store.backlog_waits(open_until + 10).await.unwrap();
    assert!(
        later
            .deferred
            .iter()
            .all(|g| g.cause == DeferCause::Retry && g.deliveries == 2),
        "{later:?}"
    );
}

pub(crate) async fn backlog_and_meters_count_across_processes(h: &impl Harness) {
    let store = h.open().await;
    for id in ["a", "b", "c"] {
        store.create_subscriber(sub(id, &["t"]), T0).await.unwrap();
    }
    store
        .update_subscriber(
            "c",
            SubscriberPatch {
                status: Some(SubscriberStatus::Paused),
                ..SubscriberPatch::default()
            },
            T0,
        )
        .await
        .unwrap();
    accepted(&*store, event("e1", "t"), T0).await;
    accepted(&*store, event("e2", "t"), T0).await;
    // Six not ended; the paused one's two are held, not due.
    assert_eq!(
        store.backlog(T0).await.unwrap(),
        Backlog {
            not_ended: 6,
            held: 2,
            due: 4
        }
    );
    let claimed = store.claim_due(claim(T0, 1, 10)).await.unwrap();
    let done = vec![completion(&claimed[0], Transition::Delivered, T0)];
    store.complete(done, T0).await.unwrap();
    assert_eq!(
        store.backlog(T0).await.unwrap(),
        Backlog {
            not_ended: 5,
            held: 2,
            due: 3
        }
    );

    let reading = |n: u64| MeterReading {
        new_attempts: n,
        retry_attempts: 2 * n,
        failed_attempts: n,
        busy_slot_samples: 10 * n,
        slot_samples: 100,
        answered_attempts: n,
        held_slot_samples: 5 * n,
    };
    store.record_meter("p1", T0, reading(1)).await.unwrap();
    store.record_meter("p2", T0 + 5, reading(2)).await.unwrap();
    store.record_meter("p1", T0 + 10, reading(3)).await.unwrap();
    assert_eq!(
        store.meter_totals(T0).await.unwrap(),
        reading(3) + reading(2)
    );
    assert_eq!(store.meter_totals(T0 + 6).await.unwrap(), reading(3));
    assert_eq!(
        store.meter_totals(T0 + 11).await.unwrap(),
        MeterReading::default()
    );

    // What the process has shown it can do: none on a fresh store, then the last recorded.
    assert_eq!(store.shown().await.unwrap(), None);
    let shown = |per_s: f64, evidence: Evidence| Shown { per_s, evidence };
    store
        .record_shown(T0, shown(12.5, Evidence::AtLeast))
        .await
        .unwrap();
    store
        .record_shown(T0 + 1, shown(900.25, Evidence::Saturated))
        .await
        .unwrap();
    assert_eq!(
        store.shown().await.unwrap(),
        Some(shown(900.25, Evidence::Saturated))
    );
    // Another process, started before it, records only a lower bound: it stays; a
    // saturated measurement replaces it, lower or higher.
    store
        .record_shown(T0 + 2, shown(40.0, Evidence::AtLeast))
        .await
        .unwrap();
    assert_eq!(
        store.shown().await.unwrap(),
        Some(shown(900.25, Evidence::Saturated))
    );
    store
        .record_shown(T0 + 3, shown(300.0, Evidence::Saturated))
        .await
        .unwrap();
    assert_eq!(
        store.shown().await.unwrap(),
        Some(shown(300.0, Evidence::Saturated))
    );
}
