//! The queue: publish, claim, complete, rescue, expire, count, prune, survive a restart.

use super::*;

pub(crate) async fn publish_fans_out_once(h: &impl Harness) {
    let store = h.open().await;
    store.create_subscriber(sub("all", &[]), T0).await.unwrap();
    store
        .create_subscriber(sub("ships", &["shipment.out_for_delivery"]), T0)
        .await
        .unwrap();
    store
        .create_subscriber(sub("invoices", &["invoice.paid"]), T0)
        .await
        .unwrap();
    store.create_subscriber(sub("gone", &[]), T0).await.unwrap();
    store.revoke_subscriber("gone", T0).await.unwrap();

    let e = event("SHP-20418", "shipment.out_for_delivery");
    assert_eq!(accepted(&*store, e.clone(), T0).await, 2);
    let again = store.publish(e.clone(), T0 + 5).await.unwrap();
    assert_eq!(
        again,
        PublishOutcome::AlreadyAccepted(EventReceipt {
            tenant_id: None,
            id: "SHP-20418".into(),
            event_type: "shipment.out_for_delivery".into(),
            ordering_key: None,
            deliveries: 2,
            unversioned: 0,
        })
    );
    // The same body under an ordering key is another event.
    let keyed = NewEvent {
        ordering_key: Some("SHP-20418".into()),
        ..e.clone()
    };
    assert_eq!(
        store.publish(keyed, T0).await.unwrap(),
        PublishOutcome::Conflict
    );
    let mut changed = e.clone();
    changed.payload = r#"{"shipment":"SHP-1"}"#.into();
    assert_eq!(
        store.publish(changed, T0).await.unwrap(),
        PublishOutcome::Conflict
    );
    let mut bumped = e.clone();
    bumped.payload_version = 2;
    assert_eq!(
        store.publish(bumped, T0).await.unwrap(),
        PublishOutcome::Conflict
    );
    // A publisher learns nothing of another's event: the same body is a conflict too.
    let mut owned = event("INV-7", "invoice.paid");
    owned.published_by = Some("billing".into());
    assert_eq!(accepted(&*store, owned.clone(), T0).await, 2);
    let by_other = NewEvent {
        published_by: Some("ci".into()),
        ..owned.clone()
    };
    assert_eq!(
        store.publish(by_other, T0).await.unwrap(),
        PublishOutcome::Conflict
    );
    assert!(matches!(
        store.publish(owned.clone(), T0).await.unwrap(),
        PublishOutcome::AlreadyAccepted(_)
    ));
    // An event published without tokens is another token's to no one: a token gets 409.
    let by_token = NewEvent {
        published_by: Some("ci".into()),
        ..e
    };
    assert_eq!(
        store.publish(by_token, T0).await.unwrap(),
        PublishOutcome::Conflict
    );

    let ev = store.get_event("SHP-20418").await.unwrap();
    assert_eq!(ev.deliveries, 2);
    assert_eq!(ev.accepted_at, T0);
    assert_eq!(ev.counts.scheduled, 2);
    let d = store.get_delivery("SHP-20418:ships").await.unwrap();
    assert_eq!(d.event_id, "SHP-20418");
    assert_eq!(d.subscriber_id, "ships");
    assert_eq!(d.state, DeliveryState::Scheduled);
    assert_eq!(d.attempts, 0);
    assert_eq!(d.first_seen, T0);
    assert_eq!(d.next_attempt_at, Some(T0));
    assert!(matches!(
        store.get_delivery("SHP-20418:invoices").await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.get_event("nope").await,
        Err(StoreError::NotFound(_))
    ));
    // Nothing matches: the event is still recorded, with zero deliveries.
    assert_eq!(accepted(&*store, event("e2", "nobody.cares"), T0).await, 1);
}

pub(crate) async fn claims_only_due_within_caps(h: &impl Harness) {
    let store = h.open().await;
    for id in ["a", "b"] {
        store.create_subscriber(sub(id, &[]), T0).await.unwrap();
    }
    for i in 0..5 {
        accepted(&*store, event(&format!("e{i}"), "t"), T0 + i).await;
    }
    // Nothing is due before it was accepted.
    assert!(store
        .claim_due(claim(T0 - 1, 100, 10))
        .await
        .unwrap()
        .is_empty());
    // Cap 2 per subscriber: 2 for a, 2 for b, oldest first.
    let first = store.claim_due(claim(T0 + 10, 100, 2)).await.unwrap();
    assert_eq!(first.len(), 4);
    let mut ids: Vec<&str> = first.iter().map(|c| c.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["e0:a", "e0:b", "e1:a", "e1:b"]);
    assert!(first
        .iter()
        .all(|c| c.attempt == 1 && c.lost_attempt_started_at.is_none()));
    assert_eq!(first[0].event.payload, r#"{"shipment":"SHP-20418"}"#);
    assert_eq!(first[0].destination.url, "http://127.0.0.1:9/a");
    // At cap: nothing more until a slot frees.
    assert!(store
        .claim_due(claim(T0 + 10, 100, 2))
        .await
        .unwrap()
        .is_empty());
    store
        .complete(
            vec![completion(&first[0], Transition::Delivered, T0 + 11)],
            T0 + 11,
        )
        .await
        .unwrap();
    let next = store.claim_due(claim(T0 + 12, 100, 2)).await.unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(
        next[0].destination.subscriber_id,
        first[0].destination.subscriber_id
    );
    // The limit is respected.
    let limited = store.claim_due(claim(T0 + 12, 1, 100)).await.unwrap();
    assert_eq!(limited.len(), 1);
    let d = store.get_delivery(&first[1].id).await.unwrap();
    assert_eq!(d.state, DeliveryState::InFlight);
    assert_eq!(d.attempts, 1);
}

pub(crate) async fn completions_free_slots_for_the_claim_that_follows(h: &impl Harness) {
    let store = h.open().await;
    store.create_subscriber(sub("a", &[]), T0).await.unwrap();
    // A deep backlog for one subscriber, and another's delivery behind all of it.
    for i in 0..300 {
        accepted(&*store, event(&format!("e{i:03}"), "t"), T0 + i).await;
    }
    store.create_subscriber(sub("b", &[]), T0).await.unwrap();
    accepted(&*store, event("late", "t"), T0 + 300).await;
    let now = T0 + 1_000;
    let first = store.claim_due(claim(now, 100, 2)).await.unwrap();
    let mut ids: Vec<&str> = first.iter().map(|c| c.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["e000:a", "e001:a", "late:b"]);
    let (a0, a1) = (&first[0], &first[1]);
    assert_eq!((a0.id.as_str(), a1.id.as_str()), ("e000:a", "e001:a"));
    // One completion applies, one lost its lease; the slot freed by the first is claimed
    // again by the claim that follows, in the same call (a is back at its cap of 2: e001
    // and the new one).
    let mut forged = completion(a1, Transition::Delivered, now);
    forged.lease = a1.lease.wrapping_add(1);
    let (completing, claimed) = store
        .complete_and_claim(
            vec![completion(a0, Transition::Delivered, now), forged],
            claim(now + 1, 100, 2),
        )
        .await;
    assert_eq!(
        completing.await.unwrap(),
        [CompletionResult::Applied, CompletionResult::LeaseLost]
    );
    let mut claimed = claimed.unwrap();
    // The freed slot: claimed in the same call where the claim sees the completions
    // (SQLite), by the next claim where it runs beside them (PostgreSQL).
    if claimed.is_empty() {
        claimed = store.claim_due(claim(now + 1, 100, 2)).await.unwrap();
    }
    let claimed: Vec<&str> = claimed.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(claimed, ["e002:a"]);
    let d = store.get_delivery("e000:a").await.unwrap();
    assert_eq!(d.state, DeliveryState::Delivered);
    assert_eq!(d.attempt_history.len(), 1);
    assert_eq!(
        store.get_delivery("e002:a").await.unwrap().state,
        DeliveryState::InFlight
    );
    // Nothing to complete and no room to claim: nothing changes.
    let (completing, claimed) = store
        .complete_and_claim(Vec::new(), claim(now + 2, 0, 2))
        .await;
    assert!(completing.await.unwrap().is_empty() && claimed.unwrap().is_empty());
}

/// With room left after what is due elsewhere, the slots completions free at a
/// subscriber's cap are claimed again (SQLite in the same call, PostgreSQL, which claims
/// beside the completions, by the next claim), never more than the limit or any cap.
pub(crate) async fn a_claim_with_completions_fills_its_limit_from_the_slots_they_free(
    h: &impl Harness,
) {
    let store = h.open().await;
    store.create_subscriber(sub("a", &[]), T0).await.unwrap();
    for i in 0..6 {
        accepted(&*store, event(&format!("e{i}"), "t"), T0 + i).await;
    }
    store.create_subscriber(sub("b", &[]), T0).await.unwrap();
    for i in 0..2 {
        accepted(&*store, event(&format!("f{i}"), "t"), T0 + 10 + i).await;
    }
    let now = T0 + 1_000;
    let first = store.claim_due(claim(now, 2, 2)).await.unwrap();
    let ids: Vec<&str> = first.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["e0:a", "e1:a"], "a at its cap of 2");
    let done = first
        .iter()
        .map(|c| completion(c, Transition::Delivered, now))
        .collect();
    let (completing, claimed) = store.complete_and_claim(done, claim(now + 1, 3, 2)).await;
    assert_eq!(completing.await.unwrap(), [CompletionResult::Applied; 2]);
    let mut claimed = claimed.unwrap();
    if claimed.len() < 3 {
        let more = store.claim_due(claim(now + 1, 3 - claimed.len(), 2)).await;
        claimed.extend(more.unwrap());
    }
    let per = |id: &str| {
        claimed
            .iter()
            .filter(|c| c.destination.subscriber_id == id)
            .count()
    };
    assert_eq!(claimed.len(), 3, "the limit, filled");
    assert!(per("a") >= 1, "a's freed slots are claimed again");
    assert!(per("a") <= 2 && per("b") <= 2, "within each cap");
}

pub(crate) async fn completion_is_fenced_by_the_lease(h: &impl Harness) {
    let store = h.open().await;
    store.create_subscriber(sub("a", &[]), T0).await.unwrap();
    accepted(&*store, event("e", "t"), T0).await;
    let c = store.claim_due(claim(T0, 10, 10)).await.unwrap().remove(0);
    let mut forged = completion(&c, Transition::Delivered, T0 + 1);
    forged.lease = c.lease.wrapping_add(1);
    assert_eq!(
        store.complete(vec![forged], T0 + 1).await.unwrap(),
        [CompletionResult::LeaseLost]
    );
    assert_eq!(
        store.get_delivery("e:a").await.unwrap().state,
        DeliveryState::InFlight
    );
    let run_at = T0 + 2_500;
    let results = store
        .complete(
            vec![completion(&c, Transition::Reschedule { run_at }, T0 + 2)],
            T0 + 2,
        )
        .await
        .unwrap();
    assert_eq!(results, [CompletionResult::Applied]);
    let d = store.get_delivery("e:a").await.unwrap();
    assert_eq!(d.state, DeliveryState::Scheduled);
    assert_eq!(d.next_attempt_at, Some(run_at));
    assert_eq!(d.attempts, 1);
    assert_eq!(d.attempt_history.len(), 1);
    assert_eq!(d.attempt_history[0].outcome, Outcome::Retryable);
    assert_eq!(d.attempt_history[0].status, Some(503));
    assert_eq!(d.attempt_history[0].policy.as_deref(), Some("default"));
    assert_eq!(
        d.attempt_history[0].response_body.as_deref(),
        Some("answer to attempt 1")
    );
    // A second completion with the same (now spent) lease changes nothing.
    assert_eq!(
        store
            .complete(vec![completion(&c, Transition::Delivered, T0 + 3)], T0 + 3)
            .await
            .unwrap(),
        [CompletionResult::LeaseLost]
    );
    assert_eq!(store.next_wakeup(i64::MAX).await.unwrap(), Some(run_at));
    assert!(store
        .claim_due(claim(run_at - 1, 10, 10))
        .await
        .unwrap()
        .is_empty());
    let again = store.claim_due(claim(run_at, 10, 10)).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempt, 2);
    assert_eq!(again[0].due_at, run_at);
    store
        .complete(
            vec![completion(&again[0], Transition::Delivered, run_at + 5)],
            run_at + 5,
        )
        .await
        .unwrap();
    let d = store.get_delivery("e:a").await.unwrap();
    assert_eq!(d.state, DeliveryState::Delivered);
    assert_eq!(d.next_attempt_at, None);
    let ordinals: Vec<u32> = d.attempt_history.iter().map(|a| a.ordinal).collect();
    assert_eq!(ordinals, [1, 2]);
    assert_eq!(store.get_event("e").await.unwrap().counts.delivered, 1);
    assert_eq!(store.next_wakeup(i64::MAX).await.unwrap(), None);
}

pub(crate) async fn rescue_returns_lost_attempts(h: &impl Harness) {
    let store = h.open().await;
    store.create_subscriber(sub("a", &[]), T0).await.unwrap();
    accepted(&*store, event("e", "t"), T0).await;
    let lost = store.claim_due(claim(T0, 10, 10)).await.unwrap().remove(0);
    assert_eq!(store.next_wakeup(i64::MAX).await.unwrap(), Some(T0 + LEASE));
    assert!(store
        .rescue_expired(T0 + LEASE - 1, 10, LEASE)
        .await
        .unwrap()
        .is_empty());
    let rescued = store
        .rescue_expired(T0 + LEASE, 10, LEASE)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(
        rescued.lost_attempt_started_at,
        Some(T0),
        "the lost attempt started when it was claimed"
    );
    assert_eq!(rescued.id, lost.id);
    assert_eq!(rescued.attempt, 1, "the lost attempt was already counted");
    assert_ne!(rescued.lease, lost.lease);
    // The lost worker comes back: its completion is refused.
    assert_eq!(
        store
            .complete(
                vec![completion(&lost, Transition::Delivered, T0 + LEASE)],
                T0 + LEASE
            )
            .await
            .unwrap(),
        [CompletionResult::LeaseLost]
    );
    // The rescuer records the lost attempt and the policy's decision.
    let mut done = completion(
        &rescued,
        Transition::Reschedule {
            run_at: T0 + LEASE + 100,
        },
        T0 + LEASE,
    );
    done.record.outcome = Outcome::Lost;
    done.record.started_at = T0;
    done.record.status = None;
    done.record.error = Some("lease expired".into());
    assert_eq!(
        store.complete(vec![done], T0 + LEASE).await.unwrap(),
        [CompletionResult::Applied]
    );
    let d = store.get_delivery("e:a").await.unwrap();
    assert_eq!(d.attempts, 1);
    let record = &d.attempt_history[0];
    assert_eq!(record.error.as_deref(), Some("lease expired"));
    assert_eq!((record.outcome, record.started_at), (Outcome::Lost, T0));
    assert_eq!(
        store.get_subscriber("a").await.unwrap().breaker,
        Default::default(),
        "a lost attempt is no subscriber failure"
    );
    assert_eq!(
        store
            .claim_due(claim(T0 + LEASE + 100, 10, 10))
            .await
            .unwrap()[0]
            .attempt,
        2
    );
}

pub(crate) async fn state_survives_reopen(h: &impl Harness) {
    let store = h.open().await;
    store.create_subscriber(sub("a", &[]), T0).await.unwrap();
    accepted(&*store, event("e", "t"), T0).await;
    let c = store.claim_due(claim(T0, 10, 10)).await.unwrap().remove(0);
    store
        .complete(
            vec![completion(
                &c,
                Transition::Reschedule { run_at: T0 + 4_321 },
                T0 + 1,
            )],
            T0 + 1,
        )
        .await
        .unwrap();
    accepted(&*store, event("f", "t"), T0 + 2).await;
    let in_flight = store.claim_due(claim(T0 + 2, 1, 10)).await.unwrap();
    assert_eq!(in_flight[0].id, "f:a");
    let before = store.get_delivery("e:a").await.unwrap();
    drop(store);

    let store = h.open().await;
    let after = store.get_delivery("e:a").await.unwrap();
    assert_eq!(after, before);
    assert_eq!(after.next_attempt_at, Some(T0 + 4_321));
    assert_eq!(after.first_seen, T0);
    assert_eq!(after.attempts, 1);
    // The delivery left in flight by the "dead" process still occupies its slot (cap 1)
    // until its lease runs out and it is rescued.
    assert!(store
        .claim_due(claim(T0 + 5_000, 10, 1))
        .await
        .unwrap()
        .is_empty());
    let rescued = store
        .rescue_expired(T0 + 2 + LEASE, 10, LEASE)
        .await
        .unwrap();
    assert_eq!(rescued.len(), 1);
    assert_eq!(rescued[0].id, "f:a");
}

pub(crate) async fn prune_removes_old_delivered_only(h: &impl Harness) {
    let store = h.open().await;
    for id in ["a", "b"] {
        store.create_subscriber(sub(id, &[]), T0).await.unwrap();
    }
    accepted(&*store, event("old", "t"), T0).await;
    accepted(&*store, event("audited", "t"), T0).await;
    let first = store.claim_due(claim(T0, 10, 10)).await.unwrap();
    let done = first
        .iter()
        .map(|c| match c.id.as_str() {
            "old:b" => completion(c, Transition::Dead(DeadReason::PermanentFailure), T0),
            "audited:a" => completion(c, Transition::Dead(DeadReason::AttemptsExhausted), T0),
            _ => completion(c, Transition::Delivered, T0),
        })
        .collect();
    store.complete(done, T0).await.unwrap();
    // A replayed delivery that is then delivered stays: the audit names it.
    let replay = store
        .replay(
            ReplayRequest {
                tenant_id: None,
                reason: DeadReason::AttemptsExhausted,
                subscriber_id: None,
                limit: 10,
                per_second: None,
                requested_by: None,
                expected: None,
            },
            T0 + 1,
        )
        .await
        .unwrap();
    assert_eq!(replay.delivery_ids, ["audited:a"]);
    let again = store.claim_due(claim(T0 + 1, 10, 10)).await.unwrap();
    store
        .complete(
            vec![completion(&again[0], Transition::Delivered, T0 + 1)],
            T0 + 1,
        )
        .await
        .unwrap();
    accepted(&*store, event("new", "t"), T0 + 500).await;
    let fresh = store.claim_due(claim(T0 + 500, 10, 10)).await.unwrap();
    let done = fresh
        .iter()
        .map(|c| completion(c, Transition::Delivered, T0 + 500))
        .collect();
    store.complete(done, T0 + 500).await.unwrap();

    // old:a and audited:b were delivered at T0; nothing else qualifies. Batches of one.
    assert_eq!(store.prune_delivered(T0 + 100, 1).await.unwrap(), 1);
    assert_eq!(store.prune_delivered(T0 + 100, 1).await.unwrap(), 1);
    assert_eq!(store.prune_delivered(T0 + 100, 1).await.unwrap(), 0);
    for gone in ["old:a", "audited:b"] {
        assert!(
            matches!(store.get_delivery(gone).await, Err(StoreError::NotFound(_))),
            "{gone}"
        );
    }
    for kept in ["old:b", "audited:a", "new:a", "new:b"] {
        store.get_delivery(kept).await.unwrap();
    }
    assert_eq!(store.get_replay(&replay.id).await.unwrap().delivered, 1);
}

pub(crate) async fn a_heartbeat_commits(h: &impl Harness) {
    let store = h.open().await;
    store.heartbeat(T0).await.unwrap();
    store.heartbeat(T0 + 1).await.unwrap();
}

pub(crate) async fn queue_stats_show_depths_and_oldest_waits(h: &impl Harness) {
    let store = h.open().await;
    assert_eq!(
        store.queue_stats(T0, caps(10), &[]).await.unwrap(),
        QueueStats::default()
    );
    for id in ["a", "b", "c"] {
        store.create_subscriber(sub(id, &[]), T0).await.unwrap();
    }
    accepted(&*store, event("e1", "t"), T0).await;
    accepted(&*store, event("e2", "t"), T0 + 50).await;
    let claimed = store.claim_due(claim(T0 + 100, 3, 10)).await.unwrap();
    // e1:* claimed; one fails and waits for a retry, one is delivered, one stays in flight.
    let done = vec![
        completion(
            &claimed[0],
            Transition::Reschedule { run_at: T0 + 9_000 },
            T0 + 100,
        ),
        completion(&claimed[1], Transition::Delivered, T0 + 100),
    ];
    store.complete(done, T0 + 100).await.unwrap();
    let stats = store.queue_stats(T0 + 200, caps(10), &[]).await.unwrap();
    assert_eq!(
        stats.counts,
        StateCounts {
            scheduled: 4,
            in_flight: 1,
            delivered: 1,
            dead: 0
        }
    );
    assert_eq!(
        stats.oldest_ready_since,
        Some(T0 + 50),
        "e2 is due and waiting"
    );
    assert_eq!(stats.oldest_retrying_first_seen, Some(T0));
    assert!(stats.oldest_waiting_since.is_empty());

    // With a cap of one, the subscriber whose e1 is still in flight cannot take e2: it
    // waits on its cap, and is no first attempt waiting for the dispatcher.
    let busy = &claimed[2].destination.subscriber_id;
    let stats = store.queue_stats(T0 + 200, caps(1), &[]).await.unwrap();
    assert_eq!(stats.oldest_waiting_since, [(WaitingOn::Cap, T0 + 50)]);
    assert_eq!(stats.oldest_ready_since, Some(T0 + 50), "the other two");
    // Subscribers the dispatcher holds back (an attempt of theirs far slower than usual)
    // wait on that, and are not ready.
    let others: Vec<String> = ["a", "b", "c"]
        .into_iter()
        .filter(|id| id != busy)
        .map(String::from)
        .collect();
    let stats = store.queue_stats(T0 + 200, caps(1), &others).await.unwrap();
    assert_eq!(
        stats.oldest_waiting_since,
        [(WaitingOn::Cap, T0 + 50), (WaitingOn::Slow, T0 + 50)]
    );
    assert_eq!(stats.oldest_ready_since, None);
    let pause = SubscriberPatch {
        status: Some(SubscriberStatus::Paused),
        ..Default::default()
    };
    for id in ["a", "b", "c"].into_iter().filter(|id| id != busy) {
        store
            .update_subscriber(id, pause.clone(), T0 + 200)
            .await
            .unwrap();
    }
    // A claim parks the paused subscribers' due rows.
    assert!(store
        .claim_due(claim(T0 + 300, 10, 1))
        .await
        .unwrap()
        .is_empty());
    let stats = store.queue_stats(T0 + 300, caps(1), &[]).await.unwrap();
    assert_eq!(
        stats.oldest_waiting_since,
        [(WaitingOn::Cap, T0 + 50), (WaitingOn::Paused, T0 + 50)]
    );
    assert_eq!(stats.oldest_ready_since, None, "nothing a claim could take");
}

/// Every delivery not in flight ends when its window does, whatever it waits on (an open
/// breaker, a pause, a rate limit, a full cap, its own retry time), and says what that
/// was; deliveries in flight are left to their attempt's outcome.
pub(crate) async fn waiting_deliveries_die_when_their_window_ends(h: &impl Harness) {
    let store = h.open().await;
    let retry = |c: &ClaimedDelivery, run_at| completion(c, Transition::Reschedule { run_at }, T0);
    // Five retryable failures open the breaker (the default threshold).
    store
        .create_subscriber(sub("broken", &["b"]), T0)
        .await
        .unwrap();
    for i in 0..6 {
        accepted(&*store, event(&format!("b{i}"), "b"), T0).await;
    }
    let claimed = store.claim_due(claim(T0, 10, 10)).await.unwrap();
    let done = claimed.iter().map(|c| retry(c, T0 + 100)).collect();
    store.complete(done, T0).await.unwrap();
    assert!(store
        .get_subscriber("broken")
        .await
        .unwrap()
        .breaker
        .open_until
        .is_some());

    let mut rated = sub("rated", &["r"]);
    rated.rate_limit_per_second = Some(1.0);
    store.create_subscriber(rated, T0).await.unwrap();
    // Rate-limited too, with its limiter's turn come (no claim reached it): the row behind
    // another of its due rows waits for its turn at that rate; the first in line waited on
    // nothing (a claim could have taken it).
    let mut queued = sub("queued", &["q"]);
    queued.rate_limit_per_second = Some(1.0);
    store.create_subscriber(queued, T0).await.unwrap();
    let mut capped = sub("capped", &["c"]);
    capped.max_in_flight = Some(1);
    store.create_subscriber(capped, T0).await.unwrap();
    for (id, ty) in [("paused", "p"), ("idle", "i"), ("busy", "f")] {
        store.create_subscriber(sub(id, &[ty]), T0).await.unwrap();
    }
    let pause = SubscriberPatch {
        status: Some(SubscriberStatus::Paused),
        ..Default::default()
    };
    store.update_subscriber("paused", pause, T0).await.unwrap();
    for (e, ty) in [
        ("p0", "p"),
        ("r0", "r"),
        ("r1", "r"),
        ("c0", "c"),
        ("c1", "c"),
        ("i0", "i"),
        ("f0", "f"),
        ("q0", "q"),
        ("q1", "q"),
    ] {
        accepted(&*store, event(e, ty), T0).await;
    }
    let claimed = store
        .claim_due(ClaimRequest {
            exclude_subscribers: vec!["queued".into()],
            ..claim(T0 + 1, 100, 10)
        })
        .await
        .unwrap();
    let mut taken: Vec<&str> = claimed.iter().map(|c| c.id.as_str()).collect();
    taken.sort();
    assert_eq!(taken, ["c0:capped", "f0:busy", "i0:idle", "r0:rated"]);
    let idle = claimed.iter().find(|c| c.id == "i0:idle").unwrap();
    store
        .complete(vec![retry(idle, T0 + 10_000)], T0 + 1)
        .await
        .unwrap();
    // A claim never takes a delivery whose window has ended (at T0 + 600 with a 500 ms
    // window), not even one nothing else holds back: the sweep ends it.
    store
        .create_subscriber(sub("open", &["o"]), T0)
        .await
        .unwrap();
    accepted(&*store, event("o0", "o"), T0).await;
    let mut late_claim = claim(T0 + 600, 100, 10);
    late_claim.window_ended_for_start = T0 + 100;
    assert!(store.claim_due(late_claim).await.unwrap().is_empty());
    accepted(&*store, event("late", "i"), T0 + 400).await;

    // A 500 ms window: everything published at T0 has ended it by T0 + 600.
    let sweep = WindowSweep {
        now: T0 + 600,
        window_ms: 500,
        caps: caps(10),
        limit: 1000,
    };
    // Each death answered by its subscriber, for the dead letters counted by subscriber.
    let mut expired = store.expire_windows(sweep).await.unwrap();
    expired.sort();
    assert_eq!(
        expired,
        [
            "broken", "broken", "broken", "broken", "broken", "broken", "capped", "idle", "open",
            "paused", "queued", "queued", "rated"
        ]
    );
    let waited = |id: &'static str| {
        let store = store.clone();
        async move {
            let d = store.get_delivery(id).await.unwrap();
            assert_eq!(d.state, DeliveryState::Dead, "{id}");
            assert_eq!(d.dead_reason, Some(DeadReason::WindowExpired), "{id}");
            assert_eq!(d.dead_at, Some(T0 + 600));
            d.waiting_on
        }
    };
    for i in 0..6 {
        let id: &'static str = [
            "b0:broken",
            "b1:broken",
            "b2:broken",
            "b3:broken",
            "b4:broken",
            "b5:broken",
        ][i];
        assert_eq!(waited(id).await, Some(WaitingOn::Breaker));
    }
    assert_eq!(waited("p0:paused").await, Some(WaitingOn::Paused));
    assert_eq!(waited("r1:rated").await, Some(WaitingOn::RateLimit));
    assert_eq!(waited("q0:queued").await, None);
    assert_eq!(waited("q1:queued").await, Some(WaitingOn::RateLimit));
    assert_eq!(waited("c1:capped").await, Some(WaitingOn::Cap));
    assert_eq!(waited("i0:idle").await, None);
    assert_eq!(waited("o0:open").await, None);
    for id in ["r0:rated", "c0:capped", "f0:busy"] {
        assert_eq!(
            store.get_delivery(id).await.unwrap().state,
            DeliveryState::InFlight
        );
    }
    assert_eq!(
        store.get_delivery("late:idle").await.unwrap().state,
        DeliveryState::Scheduled
    );
    let letters = store
        .list_dead_letters(
            DeadLetterFilter {
                tenant_id: None,
                reason: Some(DeadReason::WindowExpired),
                subscriber_id: Some("paused".into()),
            },
            10,
            None,
        )
        .await
        .unwrap();
    assert_eq!(letters.items[0].waiting_on, Some(WaitingOn::Paused));
    assert!(
        store.expire_windows(sweep).await.unwrap().is_empty(),
        "nothing twice"
    );
    // The idle worker wakes for the next window's end too.
    store
        .update_subscriber(
            "idle",
            SubscriberPatch {
                status: Some(SubscriberStatus::Paused),
                ..Default::default()
            },
            T0 + 600,
        )
        .await
        .unwrap();
    let leases_end = T0 + 1 + LEASE;
    assert!(store
        .claim_due(claim(T0 + 600, 10, 10))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store.next_wakeup(500).await.unwrap(),
        Some((T0 + 900).min(leases_end)),
        "late:idle is held: only its window's end wakes the worker"
    );
    // A replay starts a new window and clears what it waited on.
    store
        .update_subscriber(
            "paused",
            SubscriberPatch {
                status: Some(SubscriberStatus::Active),
                ..Default::default()
            },
            T0 + 700,
        )
        .await
        .unwrap();
    let replay = ReplayRequest {
        tenant_id: None,
        reason: DeadReason::WindowExpired,
        subscriber_id: Some("paused".into()),
        limit: 10,
        per_second: None,
        requested_by: None,
        expected: None,
    };
    store.replay(replay, T0 + 700).await.unwrap();
    let p0 = store.get_delivery("p0:paused").await.unwrap();
    assert_eq!(
        (p0.state, p0.window_start, p0.waiting_on),
        (DeliveryState::Scheduled, T0 + 700, None)
    );
}

pub(crate) async fn a_publish_over_its_admission_stores_nothing(h: &impl Harness) {
    let store = h.open().await;
    for id in ["a", "b", "c"] {
        store.create_subscriber(sub(id, &["t"]), T0).await.unwrap();
    }
    let mut e = event("e1", "t");
    e.admit_at_most = Some(2);
    let refused = store.publish(e.clone(), T0).await;
    assert!(
        matches!(
            refused,
            Err(StoreError::OverCapacity {
                deliveries: 3,
                room: 2
            })
        ),
        "{refused:?}"
    );
    assert!(matches!(
        store.get_event("e1").await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(store.backlog(T0).await.unwrap(), Backlog::default());
    e.admit_at_most = Some(3);
    assert_eq!(accepted(&*store, e.clone(), T0).await, 3);
    // Already accepted: answered as before, whatever the room now.
    e.admit_at_most = Some(0);
    assert!(matches!(
        store.publish(e, T0).await.unwrap(),
        PublishOutcome::AlreadyAccepted(_)
    ));
}

/// An event's `traceparent` comes back with every claimed delivery of it (in every payload
/// version) and with the event, and one published without stays without; a re-publish
/// ignores it.
pub(crate) async fn a_claim_reads_the_event_s_traceparent(h: &impl Harness) {
    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let store = h.open().await;
    store
        .create_subscriber(sub("latest", &[]), T0)
        .await
        .unwrap();
    let mut pinned = sub("pinned", &[]);
    pinned.payload_version = Some(1);
    store.create_subscriber(pinned, T0).await.unwrap();
    let traced = NewEvent {
        traceparent: Some(TRACEPARENT.into()),
        earlier_payloads: vec![(1, r#"{"v":1}"#.into())],
        payload_version: 2,
        ..event("traced", "shipment.updated")
    };
    assert_eq!(accepted(&*store, traced.clone(), T0).await, 2);
    assert_eq!(
        accepted(&*store, event("plain", "shipment.updated"), T0).await,
        2
    );
    let again = NewEvent {
        traceparent: None,
        ..traced
    };
    assert!(matches!(
        store.publish(again, T0).await.unwrap(),
        PublishOutcome::AlreadyAccepted(_)
    ));
    let claimed = store.claim_due(claim(T0, 10, 10)).await.unwrap();
    assert_eq!(claimed.len(), 4);
    for c in &claimed {
        let expected = (c.event.id == "traced").then_some(TRACEPARENT);
        assert_eq!(c.event.traceparent.as_deref(), expected, "{}", c.id);
    }
    assert!(claimed
        .iter()
        .any(|c| c.event.id == "traced" && c.event.payload_version == 1));
    let traced = store.get_event("traced").await.unwrap();
    assert_eq!(traced.traceparent.as_deref(), Some(TRACEPARENT));
    assert_eq!(store.get_event("plain").await.unwrap().traceparent, None);
}
