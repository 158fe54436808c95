//! What holds a delivery back: caps per subscriber and per host, rate limits, breakers.

use super::*;

/// With the default breaker (5 consecutive retryable failures, 30 s cool-down).
pub(crate) async fn the_breaker_opens_defers_probes_and_closes(h: &impl Harness) {
    let store = h.open().await;
    store.create_subscriber(sub("a", &[]), T0).await.unwrap();
    for i in 0..8 {
        accepted(&*store, event(&format!("e{i}"), "t"), T0).await;
    }
    let batch = store.claim_due(claim(T0, 5, 10)).await.unwrap();
    let failed = batch
        .iter()
        .map(|c| completion(c, Transition::Reschedule { run_at: T0 + 10 }, T0 + 1))
        .collect();
    store.complete(failed, T0 + 1).await.unwrap();
    let s = store.get_subscriber("a").await.unwrap();
    assert_eq!(s.breaker.consecutive_failures, 5);
    // 30 s, jittered within a fifth.
    let open_until = s.breaker.open_until.unwrap();
    assert!((T0 + 1 + 24_000..=T0 + 1 + 36_000).contains(&open_until));
    assert_eq!(
        s.breaker.state(T0 + 2),
        hookline_policy::BreakerState::Open { until: open_until }
    );
    let stats = store.queue_stats(T0 + 2, caps(10), &[]).await.unwrap();
    assert_eq!(stats.open_breakers, ["a"]);
    // Every delivery of "a" waits behind it: the 5 retries and the 3 never tried.
    assert_eq!(
        (
            stats.behind_open_breakers,
            stats.behind_open_breakers_first_seen
        ),
        (8, Some(T0))
    );

    // Open: nothing is claimed; what was due waits for the half-open time, no attempt spent.
    assert!(store
        .claim_due(claim(T0 + 100, 10, 10))
        .await
        .unwrap()
        .is_empty());
    let waiting = store.get_delivery("e6:a").await.unwrap();
    // Second in due order (after e5, both due at T0): a millisecond after the first.
    assert_eq!(
        (waiting.next_attempt_at, waiting.attempts),
        (Some(open_until + 1), 0)
    );

    // Half-open: one probe at a time.
    let probe = store.claim_due(claim(open_until, 10, 10)).await.unwrap();
    assert_eq!(probe.len(), 1);
    assert!(store
        .claim_due(claim(open_until, 10, 10))
        .await
        .unwrap()
        .is_empty());
    store
        .complete(
            vec![completion(&probe[0], Transition::Delivered, open_until + 5)],
            open_until + 5,
        )
        .await
        .unwrap();
    let s = store.get_subscriber("a").await.unwrap();
    assert_eq!(
        s.breaker,
        hookline_policy::Breaker {
            allowance: Some(1),
            ..Default::default()
        },
        "a good probe closes it, to start slowly"
    );
    assert_eq!(
        store
            .claim_due(claim(open_until + 6, 10, 10))
            .await
            .unwrap()
            .len(),
        1
    );
}

/// Retries due in another order than their deliveries were written, behind a breaker that
/// opens: deferred a millisecond apart in due order, so the probe and the slow start after
/// it take the one due first, not the one written first (the tie at one instant went by
/// insertion order).
pub(crate) async fn deferred_deliveries_come_due_in_due_order(h: &impl Harness) {
    let store = h.open().await;
    store.create_subscriber(sub("a", &[]), T0).await.unwrap();
    for i in 0..5 {
        accepted(&*store, event(&format!("e{i}"), "t"), T0).await;
    }
    let batch = store.claim_due(claim(T0, 5, 5)).await.unwrap();
    // Five failures open the breaker; the retries are due in the order e1, e2, e0, e4, e3.
    let due_at = |id: &str| match id {
        "e0:a" => T0 + 300,
        "e1:a" => T0 + 100,
        "e2:a" => T0 + 200,
        "e3:a" => T0 + 500,
        _ => T0 + 400,
    };
    let failed = batch
        .iter()
        .map(|c| {
            let run_at = due_at(&c.id);
            completion(c, Transition::Reschedule { run_at }, T0 + 1)
        })
        .collect();
    store.complete(failed, T0 + 1).await.unwrap();
    let open_until = store
        .get_subscriber("a")
        .await
        .unwrap()
        .breaker
        .open_until
        .expect("open");
    assert!(store
        .claim_due(claim(T0 + 600, 10, 5))
        .await
        .unwrap()
        .is_empty());
    for (rank, id) in (0..).zip(["e1:a", "e2:a", "e0:a", "e4:a", "e3:a"]) {
        let d = store.get_delivery(id).await.unwrap();
        assert_eq!(d.next_attempt_at, Some(open_until + rank), "{id}");
    }
    // The probe is the one due first; then the slow start takes them in that order.
    let mut order = Vec::new();
    let mut now = open_until;
    while order.len() < 5 {
        let batch = store.claim_due(claim(now, 10, 5)).await.unwrap();
        order.extend(batch.iter().map(|c| c.id.clone()));
        let done = batch
            .iter()
            .map(|c| completion(c, Transition::Delivered, now))
            .collect();
        store.complete(done, now).await.unwrap();
        now += 10;
    }
    assert_eq!(order, ["e1:a", "e2:a", "e0:a", "e4:a", "e3:a"]);
}

/// A host whose subscribers all just closed their breakers ramps up with them: its
/// effective cap is the sum of their allowances (one each to start), never more than the
/// cap per host, not the cap per host at once.
pub(crate) async fn a_recovered_host_starts_at_one_per_subscriber(h: &impl Harness) {
    let store = h.open().await;
    let origin = "https://gateway.example";
    for i in 0..3 {
        let (id, ty) = (format!("h{i}"), format!("t{i}"));
        store
            .create_subscriber(sub_on(origin, &id, &[&ty]), T0)
            .await
            .unwrap();
        for e in 0..20 {
            accepted(&*store, event(&format!("e{e}-{i}"), &ty), T0).await;
        }
    }
    // Five failures each: all three open.
    let batch = store.claim_due(claim(T0, 15, 5)).await.unwrap();
    assert_eq!(batch.len(), 15);
    let failed = batch
        .iter()
        .map(|c| completion(c, Transition::Reschedule { run_at: T0 }, T0))
        .collect();
    store.complete(failed, T0).await.unwrap();
    assert!(store
        .claim_due(claim(T0 + 1, 100, 5))
        .await
        .unwrap()
        .is_empty());
    let mut now = 0;
    for i in 0..3 {
        let b = store
            .get_subscriber(&format!("h{i}"))
            .await
            .unwrap()
            .breaker;
        now = now.max(b.open_until.expect("open") + 100);
    }
    // The host is back: one probe each, which closes each breaker.
    let probes = store
        .claim_due(claim_per_host(now, 100, 10, 64))
        .await
        .unwrap();
    assert_eq!(spread(&probes, origin).0, 3);
    let done = probes
        .iter()
        .map(|c| completion(c, Transition::Delivered, now))
        .collect();
    store.complete(done, now).await.unwrap();
    // Then one in flight per subscriber, two, ...: 3, then 6, but never past the host's 4.
    let mut rounds = Vec::new();
    for host_cap in [64, 4] {
        now += 10;
        let batch = store
            .claim_due(claim_per_host(now, 100, 10, host_cap))
            .await
            .unwrap();
        let (on_origin, per_subscriber) = spread(&batch, origin);
        rounds.push((on_origin, per_subscriber.values().max().copied()));
        let done = batch
            .iter()
            .map(|c| completion(c, Transition::Delivered, now))
            .collect();
        store.complete(done, now).await.unwrap();
    }
    assert_eq!(rounds, [(3, Some(1)), (4, Some(2))]);
}

/// Opens `id`'s breaker at `now` with five failed attempts of its due deliveries (claimed
/// under a cap of 5), then sends its probe at the half-open time and answers it: answers
/// when it closed.
async fn open_then_probe(store: &dyn Store, id: &str, now: i64) -> i64 {
    let batch = store.claim_due(claim(now, 5, 5)).await.unwrap();
    assert_eq!(batch.len(), 5);
    let failed = batch
        .iter()
        .map(|c| completion(c, Transition::Reschedule { run_at: now }, now))
        .collect();
    store.complete(failed, now).await.unwrap();
    let open_until = store
        .get_subscriber(id)
        .await
        .unwrap()
        .breaker
        .open_until
        .expect("open");
    let probe = store.claim_due(claim(open_until, 10, 5)).await.unwrap();
    assert_eq!(probe.len(), 1);
    let done = vec![completion(&probe[0], Transition::Delivered, open_until)];
    store.complete(done, open_until).await.unwrap();
    open_until
}

/// After its probe closes the breaker, a subscriber with a deep backlog gets 1 in flight,
/// then one more per answer (1, 2, 4, ... per round), a retryable failure adding nothing,
/// until the claim finds the allowance at the cap (4 here) and ends the slow start.
pub(crate) async fn a_closed_breaker_starts_slowly(h: &impl Harness) {
    let store = h.open().await;
    store.create_subscriber(sub("a", &[]), T0).await.unwrap();
    for i in 0..30 {
        accepted(&*store, event(&format!("e{i}"), "t"), T0).await;
    }
    let mut now = open_then_probe(&*store, "a", T0).await;
    let allowance = |b: hookline_policy::Breaker| b.allowance;
    assert_eq!(
        allowance(store.get_subscriber("a").await.unwrap().breaker),
        Some(1)
    );
    let mut rounds = Vec::new();
    for round in 0..5 {
        now += 10;
        let batch = store.claim_due(claim(now, 100, 4)).await.unwrap();
        rounds.push(batch.len());
        if round == 0 {
            // At its allowance of 1: the rest wait on its cap, not ready for a claim.
            let stats = store.queue_stats(now, caps(4), &[]).await.unwrap();
            assert_eq!(stats.oldest_ready_since, None);
            assert!(
                stats
                    .oldest_waiting_since
                    .iter()
                    .any(|(cause, _)| *cause == WaitingOn::Cap),
                "{stats:?}"
            );
        }
        // The second round: one answer and one retryable failure, which keeps the
        // allowance where it is (2 + 1).
        let done = batch
            .iter()
            .enumerate()
            .map(|(i, c)| match (round, i) {
                (1, 1) => completion(c, Transition::Reschedule { run_at: now }, now),
                _ => completion(c, Transition::Delivered, now),
            })
            .collect();
        store.complete(done, now).await.unwrap();
    }
    assert_eq!(rounds, [1, 2, 3, 4, 4]);
    // The third round's claim saw 6 >= 4 and ended the ramp: the cap applies as before.
    let b = store.get_subscriber("a").await.unwrap().breaker;
    assert_eq!((b.allowance, b.open_until), (None, None));
}

/// 50 subscribers behind one host fail at the same instant: each breaker opens for its own
/// jittered period (within a fifth of the cool-down), so their deferred deliveries come due,
/// and their probes go out, spread over the period instead of at one instant.
pub(crate) async fn breakers_that_open_together_half_open_apart(h: &impl Harness) {
    let store = h.open().await;
    for i in 0..50 {
        let id = format!("s{i}");
        store
            .create_subscriber(sub_on("https://gateway.example", &id, &["t"]), T0)
            .await
            .unwrap();
    }
    for i in 0..6 {
        accepted(&*store, event(&format!("e{i}"), "t"), T0).await;
    }
    let batch = store.claim_due(claim(T0, 1_000, 5)).await.unwrap();
    assert_eq!(batch.len(), 250);
    let failed = batch
        .iter()
        .map(|c| completion(c, Transition::Reschedule { run_at: T0 + 10 }, T0 + 1))
        .collect();
    store.complete(failed, T0 + 1).await.unwrap();
    // The sixth event of each is due, behind its open breaker: deferred to its own time.
    assert!(store
        .claim_due(claim(T0 + 2, 1_000, 5))
        .await
        .unwrap()
        .is_empty());
    let mut until = Vec::new();
    for i in 0..50 {
        let s = store.get_subscriber(&format!("s{i}")).await.unwrap();
        let open_until = s.breaker.open_until.expect("open");
        assert!((T0 + 1 + 24_000..=T0 + 1 + 36_000).contains(&open_until));
        let waiting = store.get_delivery(&format!("e5:s{i}")).await.unwrap();
        assert_eq!(waiting.next_attempt_at, Some(open_until));
        until.push(open_until);
    }
    until.sort_unstable();
    until.dedup();
    assert!(
        until.len() >= 45,
        "only {} distinct half-open times",
        until.len()
    );
    assert!(until[until.len() - 1] - until[0] >= 6_000, "{until:?}");
}

pub(crate) async fn subscriber_caps_rate_limits_and_the_retry_budget(h: &impl Harness) {
    let store = h.open().await;
    let mut narrow = sub("narrow", &[]);
    narrow.max_in_flight = Some(1);
    let mut wide = sub("wide", &[]);
    wide.max_in_flight = Some(5);
    let mut slow = sub("slow", &[]);
    slow.rate_limit_per_second = Some(2.0);
    for s in [narrow, wide, slow] {
        store.create_subscriber(s, T0).await.unwrap();
    }
    assert_eq!(
        store
            .get_subscriber("slow")
            .await
            .unwrap()
            .rate_limit_per_second,
        Some(2.0)
    );
    for i in 0..6 {
        accepted(&*store, event(&format!("e{i}"), "t"), T0).await;
    }
    // Default cap 3: narrow gets 1 (its own), wide 5 (its own), slow 1 (2 per second).
    let count = |claimed: &[ClaimedDelivery], id: &str| {
        claimed
            .iter()
            .filter(|c| c.destination.subscriber_id == id)
            .count()
    };
    let first = store.claim_due(claim(T0, 100, 3)).await.unwrap();
    assert_eq!(
        (
            count(&first, "narrow"),
            count(&first, "wide"),
            count(&first, "slow")
        ),
        (1, 5, 1)
    );
    // The limiter admits the next one 500 ms later, not before.
    assert_eq!(
        count(
            &store.claim_due(claim(T0 + 499, 100, 3)).await.unwrap(),
            "slow"
        ),
        0
    );
    assert_eq!(
        count(
            &store.claim_due(claim(T0 + 500, 100, 3)).await.unwrap(),
            "slow"
        ),
        1
    );
    // Clearing the override falls back to the default cap.
    store
        .update_subscriber(
            "narrow",
            SubscriberPatch {
                max_in_flight: Some(None),
                ..Default::default()
            },
            T0 + 501,
        )
        .await
        .unwrap();
    assert_eq!(
        store.get_subscriber("narrow").await.unwrap().max_in_flight,
        None
    );
    assert_eq!(
        count(
            &store.claim_due(claim(T0 + 501, 100, 3)).await.unwrap(),
            "narrow"
        ),
        2
    );

    // The retry budget: retries beyond it stay due for later; first attempts are not held up.
    // Three of wide's five fail (fewer than the breaker's five) and wait for a retry.
    let retries: Vec<_> = first
        .iter()
        .filter(|c| c.destination.subscriber_id == "wide")
        .enumerate()
        .map(|(i, c)| {
            let next = if i < 3 {
                Transition::Reschedule { run_at: T0 + 600 }
            } else {
                Transition::Delivered
            };
            completion(c, next, T0 + 600)
        })
        .collect();
    store.complete(retries, T0 + 600).await.unwrap();
    accepted(&*store, event("fresh", "t"), T0 + 600).await;
    let mut request = claim(T0 + 600, 100, 10);
    request.max_retries = 2;
    let mixed = store.claim_due(request).await.unwrap();
    let retried = mixed.iter().filter(|c| c.attempt > 1).count();
    assert_eq!(retried, 2, "only the budgeted retries");
    assert!(
        mixed.iter().any(|c| c.id == "fresh:wide"),
        "first attempts still go"
    );
}

/// A subscriber whose own cap is above the default, with more than the default in flight,
/// still gets claims up to its own cap: a backend that left it out of the scan as full by
/// the default would stall it below what it may have.
pub(crate) async fn a_cap_above_the_default_is_claimed_up_to(h: &impl Harness) {
    let store = h.open().await;
    let mut roomy = sub("roomy", &[]);
    roomy.max_in_flight = Some(4);
    store.create_subscriber(roomy, T0).await.unwrap();
    for i in 0..6 {
        accepted(&*store, event(&format!("e{i}"), "t"), T0).await;
    }
    // The default cap is 2; three are taken (a claim's limit), one more than the default.
    assert_eq!(store.claim_due(claim(T0, 3, 2)).await.unwrap().len(), 3);
    let next = store.claim_due(claim(T0, 100, 2)).await.unwrap();
    assert_eq!(next.len(), 1, "up to its own cap of 4");
    assert!(store.claim_due(claim(T0, 100, 2)).await.unwrap().is_empty());
}

/// Thousands of due rows that cannot be taken now (their subscribers at their cap, excluded
/// as slow, or retries while the retry budget is spent) sit ahead of one deliverable row:
/// the claim still finds it. Skipping them row by row would spend the claim's scan on the
/// wall and starve everyone behind it.
pub(crate) async fn a_wall_of_unclaimable_rows_hides_nobody(h: &impl Harness) {
    let store = h.open().await;
    let wall: Vec<String> = (0..300).map(|i| format!("w{i}")).collect();
    for id in &wall {
        store.create_subscriber(sub(id, &["w"]), T0).await.unwrap();
    }
    for id in ["h1", "h2", "h3"] {
        store.create_subscriber(sub(id, &[id]), T0).await.unwrap();
    }
    for i in 0..20 {
        accepted(&*store, event(&format!("w{i}"), "w"), T0 + i).await;
    }
    let now = T0 + 1_000;
    let ids = |claimed: &[ClaimedDelivery]| -> Vec<String> {
        claimed.iter().map(|c| c.id.clone()).collect()
    };

    // Every wall subscriber at its cap of 1, 5,700 of their rows still due.
    let capped = store.claim_due(claim(now, 300, 1)).await.unwrap();
    assert_eq!(capped.len(), 300);
    accepted(&*store, event("late1", "h1"), T0 + 100).await;
    let got = store.claim_due(claim(now, 1, 1)).await.unwrap();
    assert_eq!(ids(&got), ["late1:h1"], "behind subscribers at their cap");

    // Slots free again, but every wall subscriber is excluded (slow).
    let done = capped
        .iter()
        .map(|c| completion(c, Transition::Delivered, now))
        .collect();
    store.complete(done, now).await.unwrap();
    accepted(&*store, event("late2", "h2"), T0 + 101).await;
    let mut request = claim(now, 1, 1);
    request.exclude_subscribers = wall.clone();
    let got = store.claim_due(request).await.unwrap();
    assert_eq!(ids(&got), ["late2:h2"], "behind excluded subscribers");

    // The wall's 5,700 rows become retries due now; the retry budget is spent.
    let rest = store.claim_due(claim(now, 10_000, 100)).await.unwrap();
    assert_eq!(rest.len(), 5_700);
    let retry = Transition::Reschedule { run_at: T0 + 500 };
    let done = rest.iter().map(|c| completion(c, retry, now)).collect();
    store.complete(done, now).await.unwrap();
    accepted(&*store, event("late3", "h3"), T0 + 102).await;
    let mut request = claim(now, 1, 100);
    request.max_retries = 0;
    let got = store.claim_due(request).await.unwrap();
    assert_eq!(ids(&got), ["late3:h3"], "a first attempt behind retries");
}

/// Subscribers behind one gateway (one origin, however many paths) share its cap, across
/// claims; each keeps its own cap inside it; another origin is not held by it; a completion
/// frees a place; 0 is no cap; a URL moved to another origin counts there.
pub(crate) async fn the_host_cap_holds_across_subscribers_and_inside_each_cap(h: &impl Harness) {
    const GATEWAY: &str = "https://gateway.example:8443";
    let store = h.open().await;
    for id in ["a", "b", "c"] {
        store
            .create_subscriber(sub_on(GATEWAY, id, &["e"]), T0)
            .await
            .unwrap();
    }
    store
        .create_subscriber(sub_on("https://elsewhere.example", "x", &["e"]), T0)
        .await
        .unwrap();
    for i in 0..6 {
        accepted(&*store, event(&format!("e{i}"), "e"), T0 + i).await;
    }
    let now = T0 + 1_000;
    // Each subscriber's own cap is 2, the gateway's 5: a, b and c take 5 between them.
    let first = store
        .claim_due(claim_per_host(now, 100, 2, 5))
        .await
        .unwrap();
    let (on_gateway, per_subscriber) = spread(&first, GATEWAY);
    assert_eq!(on_gateway, 5);
    assert!(
        per_subscriber.values().all(|&n| n <= 2),
        "{per_subscriber:?}"
    );
    assert_eq!(
        per_subscriber["x"], 2,
        "another origin is not held by the gateway's cap"
    );
    // The gateway is full: a later claim takes none of it.
    let more = store
        .claim_due(claim_per_host(now, 100, 2, 5))
        .await
        .unwrap();
    assert!(more.is_empty(), "{:?}", spread(&more, GATEWAY));
    // One of its attempts ends: exactly one place is free.
    let done = first
        .iter()
        .find(|c| c.destination.url.starts_with(GATEWAY))
        .unwrap();
    store
        .complete(vec![completion(done, Transition::Delivered, now)], now)
        .await
        .unwrap();
    let one = store
        .claim_due(claim_per_host(now, 100, 2, 5))
        .await
        .unwrap();
    assert_eq!(spread(&one, GATEWAY).0, 1);
    assert_eq!(one.len(), 1);
    // 0: no cap per host, only each subscriber's own (a, b and c: 2 each).
    let off = store
        .claim_due(claim_per_host(now, 100, 2, 0))
        .await
        .unwrap();
    let in_flight = first.len() - 1 + one.len() + off.len();
    assert_eq!(in_flight, 8, "2 each for a, b, c and x");
    // A subscriber moved to another origin counts there, not at the gateway.
    store
        .update_subscriber(
            "c",
            SubscriberPatch {
                url: Some("https://moved.example/hooks/c".into()),
                ..Default::default()
            },
            now,
        )
        .await
        .unwrap();
    assert_eq!(
        store.get_subscriber("c").await.unwrap().origin.as_str(),
        "https://moved.example"
    );
    let everything: Vec<ClaimedDelivery> = first.into_iter().chain(one).chain(off).collect();
    let done = everything
        .iter()
        .map(|c| completion(c, Transition::Delivered, now))
        .collect();
    store.complete(done, now).await.unwrap();
    let moved = store
        .claim_due(claim_per_host(now, 100, 10, 1))
        .await
        .unwrap();
    let (_, per_subscriber) = spread(&moved, GATEWAY);
    assert_eq!(
        per_subscriber.values().sum::<usize>(),
        3,
        "one for the gateway, one for x's origin, one for c's new one: {per_subscriber:?}"
    );
    assert_eq!(per_subscriber.get("c"), Some(&1));
}

/// 1,100 subscribers behind one gateway (more than the four scans of a claim read: leaving
/// out each subscriber seen would not get past them), 2,200 of their rows due ahead of a
/// subscriber on another host: whether the gateway is at its cap before the claim or
/// reaches it during the claim, the other host's row is claimed at once.
/// Due deliveries of subscribers below their own cap, on a host at its cap, are no
/// first attempts ready for a claim (which would read as a starved dispatcher): they wait
/// on `host_cap`, in the gauges and in what the window sweep records. A subscriber at its
/// own cap still waits on `cap`; with the cap per host off or not reached, they are ready.
pub(crate) async fn deliveries_held_back_by_their_host_wait_on_its_cap(h: &impl Harness) {
    let store = h.open().await;
    let origin = "https://gateway.example";
    for i in 0..3 {
        store
            .create_subscriber(sub_on(origin, &format!("g{i}"), &["g"]), T0)
            .await
            .unwrap();
    }
    store
        .create_subscriber(sub("elsewhere", &["o"]), T0)
        .await
        .unwrap();
    accepted(&*store, event("e0", "g"), T0).await;
    accepted(&*store, event("e1", "g"), T0).await;
    // One each for two of the three, which fills the host's two places.
    let claimed = store
        .claim_due(claim_per_host(T0, 100, 1, 2))
        .await
        .unwrap();
    assert_eq!(spread(&claimed, origin).0, 2);
    accepted(&*store, event("o0", "o"), T0 + 1).await;
    let host_caps = |per_subscriber, per_host| InFlightCaps {
        max_in_flight_per_subscriber: per_subscriber,
        max_in_flight_per_host: per_host,
    };

    let stats = store
        .queue_stats(T0 + 10, host_caps(10, 2), &[])
        .await
        .unwrap();
    assert_eq!(stats.oldest_waiting_since, [(WaitingOn::HostCap, T0)]);
    assert_eq!(stats.oldest_ready_since, Some(T0 + 1), "only elsewhere's");
    // The subscribers at their own cap of one wait on it; the third on its host.
    let stats = store
        .queue_stats(T0 + 10, host_caps(1, 2), &[])
        .await
        .unwrap();
    assert_eq!(
        stats.oldest_waiting_since,
        [(WaitingOn::Cap, T0), (WaitingOn::HostCap, T0)]
    );
    for (per_host, room) in [(0, "off"), (3, "a place left")] {
        let stats = store
            .queue_stats(T0 + 10, host_caps(10, per_host), &[])
            .await
            .unwrap();
        assert!(stats.oldest_waiting_since.is_empty(), "{room}: {stats:?}");
        assert_eq!(stats.oldest_ready_since, Some(T0), "{room}");
    }

    let sweep = WindowSweep {
        now: T0 + 600,
        window_ms: 500,
        caps: host_caps(10, 2),
        limit: 1000,
    };
    assert_eq!(store.expire_windows(sweep).await.unwrap().len(), 5);
    let in_flight: Vec<&str> = claimed.iter().map(|c| c.id.as_str()).collect();
    for id in ["e0:g0", "e0:g1", "e0:g2", "e1:g0", "e1:g1", "e1:g2"] {
        let d = store.get_delivery(id).await.unwrap();
        if in_flight.contains(&id) {
            assert_eq!(d.state, DeliveryState::InFlight, "{id}");
        } else {
            assert_eq!(d.dead_reason, Some(DeadReason::WindowExpired), "{id}");
            assert_eq!(d.waiting_on, Some(WaitingOn::HostCap), "{id}");
        }
    }
    let ready = store.get_delivery("o0:elsewhere").await.unwrap();
    assert_eq!(
        (ready.dead_reason, ready.waiting_on),
        (Some(DeadReason::WindowExpired), None)
    );
}

pub(crate) async fn a_wall_of_rows_on_a_host_at_its_cap_hides_nobody(h: &impl Harness) {
    const GATEWAY: &str = "https://gateway.example";
    let store = h.open().await;
    for i in 0..1_100 {
        let id = format!("g{i}");
        store
            .create_subscriber(sub_on(GATEWAY, &id, &["g"]), T0)
            .await
            .unwrap();
    }
    store
        .create_subscriber(sub_on("https://healthy.example", "healthy", &["h"]), T0)
        .await
        .unwrap();
    for i in 0..2 {
        accepted(&*store, event(&format!("g{i}"), "g"), T0 + i).await;
    }
    let now = T0 + 1_000;
    // The claim itself fills the gateway (8), then meets its 2,192 other rows first.
    accepted(&*store, event("late1", "h"), T0 + 100).await;
    let got = store
        .claim_due(claim_per_host(now, 16, 4, 8))
        .await
        .unwrap();
    let (on_gateway, _) = spread(&got, GATEWAY);
    assert_eq!(on_gateway, 8);
    assert!(
        got.iter().any(|c| c.id == "late1:healthy"),
        "the healthy host's row behind a gateway filled by this claim"
    );
    // The gateway already at its cap when the claim begins.
    accepted(&*store, event("late2", "h"), T0 + 101).await;
    let got = store.claim_due(claim_per_host(now, 1, 4, 8)).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["late2:healthy"], "behind a gateway at its cap");
}

/// Each subscriber gets the highest version at or below its pin (the latest when
/// unpinned); one pinned below every version gets a delivery that is dead at once, on the
/// record; a replay chooses again by the pin at replay time.
/// A subscriber with free slots and a deep backlog at the head of the due order: a claim
/// takes its slots, and its other rows must not fill the scan and hide the rows behind.
pub(crate) async fn a_subscriber_used_up_mid_claim_hides_nobody(h: &impl Harness) {
    let store = h.open().await;
    store
        .create_subscriber(sub("deep", &["d"]), T0)
        .await
        .unwrap();
    store
        .create_subscriber(sub("behind", &["b"]), T0)
        .await
        .unwrap();
    for i in 0..400 {
        accepted(&*store, event(&format!("d{i}"), "d"), T0 + i).await;
    }
    accepted(&*store, event("late", "b"), T0 + 1_000).await;
    let got = store.claim_due(claim(T0 + 2_000, 10, 5)).await.unwrap();
    let mut ids: Vec<&str> = got.iter().map(|c| c.id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        [
            "d0:deep",
            "d1:deep",
            "d2:deep",
            "d3:deep",
            "d4:deep",
            "late:behind"
        ]
    );
}
