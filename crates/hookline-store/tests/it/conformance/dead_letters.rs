//! Dead letters and the replays that release them.

use super::*;

pub(crate) async fn dead_letters_filter_and_page(h: &impl Harness) {
    let store = h.open().await;
    for id in ["a", "b"] {
        store.create_subscriber(sub(id, &[]), T0).await.unwrap();
    }
    for i in 0..3 {
        accepted(&*store, event(&format!("e{i}"), "t"), T0).await;
    }
    assert_eq!(
        kill_all(&*store, T0 + 1, DeadReason::AttemptsExhausted).await,
        6
    );
    accepted(&*store, event("p", "t"), T0 + 2).await;
    assert_eq!(
        kill_all(&*store, T0 + 3, DeadReason::PermanentFailure).await,
        2
    );

    let all = store
        .list_dead_letters(DeadLetterFilter::default(), 100, None)
        .await
        .unwrap();
    assert_eq!(all.items.len(), 8);
    let exhausted_a = store
        .list_dead_letters(
            DeadLetterFilter {
                tenant_id: None,
                reason: Some(DeadReason::AttemptsExhausted),
                subscriber_id: Some("a".into()),
            },
            2,
            None,
        )
        .await
        .unwrap();
    assert_eq!(exhausted_a.items.len(), 2);
    let more = store
        .list_dead_letters(
            DeadLetterFilter {
                tenant_id: None,
                reason: Some(DeadReason::AttemptsExhausted),
                subscriber_id: Some("a".into()),
            },
            2,
            exhausted_a.next_cursor,
        )
        .await
        .unwrap();
    assert_eq!(more.items.len(), 1);
    assert_eq!(more.next_cursor, None);
    let item = &more.items[0];
    assert_eq!(item.subscriber_id, "a");
    assert_eq!(item.event_type, "t");
    assert_eq!(item.payload_version, Some(1));
    assert_eq!(item.dead_at, T0 + 1);
    assert_eq!(item.attempt_history.len(), 1);

    let delivered_filter = DeliveryFilter {
        tenant_id: None,
        state: Some(DeliveryState::Dead),
        subscriber_id: Some("b".into()),
        event_id: Some("p".into()),
        order: ListOrder::OldestFirst,
    };
    let listed = store
        .list_deliveries(delivered_filter, 10, None)
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].id, "p:b");

    // A subscriber's deliveries, newest first, paged back in time; oldest first, forward.
    let ids = |page: &Page<Delivery>| -> Vec<String> {
        page.items.iter().map(|d| d.id.clone()).collect()
    };
    let of_a = |order| DeliveryFilter {
        subscriber_id: Some("a".into()),
        order,
        ..Default::default()
    };
    let newest = store
        .list_deliveries(of_a(ListOrder::NewestFirst), 2, None)
        .await
        .unwrap();
    assert_eq!(ids(&newest), ["p:a", "e2:a"]);
    let older = store
        .list_deliveries(of_a(ListOrder::NewestFirst), 2, newest.next_cursor)
        .await
        .unwrap();
    assert_eq!(ids(&older), ["e1:a", "e0:a"]);
    assert_eq!(older.next_cursor, None);
    let oldest = store
        .list_deliveries(of_a(ListOrder::OldestFirst), 3, None)
        .await
        .unwrap();
    assert_eq!(ids(&oldest), ["e0:a", "e1:a", "e2:a"]);
}

pub(crate) async fn dead_letters_group_by_reason_and_subscriber(h: &impl Harness) {
    let store = h.open().await;
    for id in ["a", "b"] {
        store.create_subscriber(sub(id, &[]), T0).await.unwrap();
    }
    for i in 0..3 {
        accepted(&*store, event(&format!("e{i}"), "t"), T0).await;
    }
    kill_all(&*store, T0 + 1, DeadReason::AttemptsExhausted).await;
    store
        .update_subscriber(
            "a",
            SubscriberPatch {
                status: Some(SubscriberStatus::Paused),
                ..Default::default()
            },
            T0 + 2,
        )
        .await
        .unwrap();
    accepted(&*store, event("p", "t"), T0 + 5).await;
    kill_all(&*store, T0 + 9, DeadReason::PermanentFailure).await;
    let group = |reason, subscriber: &str, count, oldest, newest| DeadLetterGroup {
        reason,
        subscriber_id: subscriber.into(),
        // Each group says its subscriber's status now (a revoked one's are no replay's).
        subscriber_status: if subscriber == "a" {
            SubscriberStatus::Paused
        } else {
            SubscriberStatus::Active
        },
        count,
        oldest_dead_at: oldest,
        newest_dead_at: newest,
    };
    let all = store.dead_letter_groups(i64::MIN, None, 100).await.unwrap();
    // Largest first, then by reason and subscriber; "a" is paused, so "p" died for "b" only.
    assert_eq!(
        all,
        vec![
            group(DeadReason::AttemptsExhausted, "a", 3, T0 + 1, T0 + 1),
            group(DeadReason::AttemptsExhausted, "b", 3, T0 + 1, T0 + 1),
            group(DeadReason::PermanentFailure, "b", 1, T0 + 9, T0 + 9),
        ]
    );
    assert_eq!(
        store.dead_letter_groups(i64::MIN, None, 1).await.unwrap(),
        all[..1]
    );
    assert_eq!(
        store.dead_letters_by_reason(i64::MIN, None).await.unwrap(),
        [
            (DeadReason::AttemptsExhausted, 6),
            (DeadReason::PermanentFailure, 1)
        ]
    );
    assert_eq!(
        store.dead_letters_by_reason(T0 + 2, None).await.unwrap(),
        [(DeadReason::PermanentFailure, 1)]
    );
    // Only those that died since.
    assert_eq!(
        store.dead_letter_groups(T0 + 2, None, 100).await.unwrap(),
        all[2..]
    );
    // A replayed dead letter leaves its group.
    store
        .replay(
            ReplayRequest {
                tenant_id: None,
                reason: DeadReason::PermanentFailure,
                subscriber_id: None,
                limit: 10,
                per_second: None,
                requested_by: None,
                expected: None,
            },
            T0 + 10,
        )
        .await
        .unwrap();
    assert_eq!(
        store.dead_letter_groups(i64::MIN, None, 100).await.unwrap(),
        all[..2]
    );
}

pub(crate) async fn replay_is_bounded_paced_and_audited(h: &impl Harness) {
    let store = h.open().await;
    for id in ["a", "b", "gone"] {
        store.create_subscriber(sub(id, &[]), T0).await.unwrap();
    }
    for i in 0..4 {
        accepted(&*store, event(&format!("e{i}"), "t"), T0).await;
    }
    kill_all(&*store, T0 + 1, DeadReason::AttemptsExhausted).await;
    store.revoke_subscriber("gone", T0 + 2).await.unwrap();

    let bad = ReplayRequest {
        tenant_id: None,
        reason: DeadReason::AttemptsExhausted,
        subscriber_id: None,
        limit: 0,
        per_second: None,
        requested_by: None,
        expected: None,
    };
    assert!(matches!(
        store.replay(bad.clone(), T0).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store
            .replay(
                ReplayRequest {
                    limit: 1001,
                    ..bad.clone()
                },
                T0
            )
            .await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store
            .replay(
                ReplayRequest {
                    limit: 1,
                    per_second: Some(0.0),
                    ..bad.clone()
                },
                T0
            )
            .await,
        Err(StoreError::Invalid(_))
    ));

    let now = T0 + 60_000;
    let replay = store
        .replay(
            ReplayRequest {
                tenant_id: None,
                reason: DeadReason::AttemptsExhausted,
                subscriber_id: None,
                limit: 5,
                per_second: Some(2.0),
                requested_by: Some("oncall".into()),
                expected: None,
            },
            now,
        )
        .await
        .unwrap();
    assert_eq!(replay.selected, 5);
    assert_eq!(replay.delivery_ids.len(), 5);
    assert!(replay.delivery_ids.iter().all(|id| !id.ends_with(":gone")));
    assert_eq!(replay.requested_by.as_deref(), Some("oncall"));
    assert_eq!((replay.delivered, replay.dead), (0, 0));
    let mut release: Vec<i64> = Vec::new();
    for id in &replay.delivery_ids {
        let d = store.get_delivery(id).await.unwrap();
        assert_eq!(d.state, DeliveryState::Scheduled);
        assert_eq!(d.attempts, 0, "a fresh budget");
        assert_eq!(d.dead_reason, None);
        assert_eq!(d.first_seen, T0, "first_seen is history and stays");
        assert_eq!(Some(d.window_start), d.next_attempt_at, "a fresh window");
        release.push(d.next_attempt_at.unwrap());
    }
    release.sort();
    assert_eq!(
        release,
        [now, now + 500, now + 1000, now + 1500, now + 2000]
    );
    // 12 died (3 subscribers x 4 events), 5 were replayed; the 4 on "gone" are among the 7 left.
    let left = store
        .list_dead_letters(
            DeadLetterFilter {
                tenant_id: None,
                reason: Some(DeadReason::AttemptsExhausted),
                subscriber_id: None,
            },
            100,
            None,
        )
        .await
        .unwrap();
    assert_eq!(left.items.len(), 7);
    assert_eq!(
        left.items
            .iter()
            .filter(|d| d.subscriber_id == "gone")
            .count(),
        4
    );

    // Paced: only the first is due at `now`.
    let first = store.claim_due(claim(now, 100, 100)).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].attempt, 1);
    assert_eq!(first[0].window_start, now);
    store
        .complete(vec![completion(&first[0], Transition::Delivered, now)], now)
        .await
        .unwrap();
    let second = store.claim_due(claim(now + 500, 100, 100)).await.unwrap();
    store
        .complete(
            vec![completion(
                &second[0],
                Transition::Dead(DeadReason::PermanentFailure),
                now + 500,
            )],
            now + 500,
        )
        .await
        .unwrap();
    let audit = store.get_replay(&replay.id).await.unwrap();
    assert_eq!((audit.delivered, audit.dead), (1, 1));
    assert_eq!(audit.created_at, now);
    assert_eq!(audit.limit, 5);
    assert_eq!(audit.per_second, Some(2.0));
    let listed = store
        .list_replays(None, ListOrder::OldestFirst, 10, None)
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert!(matches!(
        store.get_replay("rpl_nope").await,
        Err(StoreError::NotFound(_))
    ));

    // A replay filtered to a subscriber touches only it; the revoked one is never chosen.
    let only_gone = store
        .replay(
            ReplayRequest {
                subscriber_id: Some("gone".into()),
                limit: 10,
                ..bad.clone()
            },
            now,
        )
        .await
        .unwrap();
    assert_eq!(only_gone.selected, 0);
    let only_b = store
        .replay(
            ReplayRequest {
                subscriber_id: Some("b".into()),
                limit: 10,
                ..bad
            },
            now,
        )
        .await
        .unwrap();
    assert!(only_b.delivery_ids.iter().all(|id| id.ends_with(":b")));
    // The audit, oldest or newest first, paged either way.
    let oldest = store
        .list_replays(None, ListOrder::OldestFirst, 100, None)
        .await
        .unwrap();
    let ids = |p: &Page<Replay>| p.items.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
    assert!(oldest.items.len() >= 2, "{:?}", ids(&oldest));
    let mut newest = ids(&oldest);
    newest.reverse();
    let first = store
        .list_replays(None, ListOrder::NewestFirst, 1, None)
        .await
        .unwrap();
    let rest = store
        .list_replays(None, ListOrder::NewestFirst, 100, first.next_cursor.clone())
        .await
        .unwrap();
    assert_eq!([ids(&first), ids(&rest)].concat(), newest);
}

/// Dead letters are listed oldest dead first (then by key), the order a replay selects in:
/// listing N and replaying N with the same filter takes exactly those N, and a dry run
/// names them without changing anything. A delivery replayed twice counts in the later
/// replay's audit only.
pub(crate) async fn replay_selects_what_was_listed_and_audits_each_outcome_once(h: &impl Harness) {
    let store = h.open().await;
    store.create_subscriber(sub("a", &[]), T0).await.unwrap();
    for i in 0..6 {
        accepted(&*store, event(&format!("e{i}"), "t"), T0).await;
    }
    let claimed = store.claim_due(claim(T0, 10, 10)).await.unwrap();
    // The later events die first: death order is not key order.
    let died_at = |c: &ClaimedDelivery| {
        if c.id.as_str() < "e3" {
            T0 + 2
        } else {
            T0 + 1
        }
    };
    for c in &claimed {
        let done = completion(
            c,
            Transition::Dead(DeadReason::PermanentFailure),
            died_at(c),
        );
        store.complete(vec![done], died_at(c)).await.unwrap();
    }
    let filter = DeadLetterFilter {
        tenant_id: None,
        reason: Some(DeadReason::PermanentFailure),
        subscriber_id: None,
    };
    let first = store
        .list_dead_letters(filter.clone(), 4, None)
        .await
        .unwrap();
    let listed: Vec<String> = first.items.iter().map(|d| d.delivery_id.clone()).collect();
    assert_eq!(listed, ["e3:a", "e4:a", "e5:a", "e0:a"]);
    let rest = store
        .list_dead_letters(filter.clone(), 4, first.next_cursor.clone())
        .await
        .unwrap();
    let rest: Vec<&str> = rest.items.iter().map(|d| d.delivery_id.as_str()).collect();
    assert_eq!(rest, ["e1:a", "e2:a"]);
    assert!(matches!(
        store.list_dead_letters(filter, 4, Some("12".into())).await,
        Err(StoreError::Invalid(_))
    ));

    let request = |limit| ReplayRequest {
        tenant_id: None,
        reason: DeadReason::PermanentFailure,
        subscriber_id: None,
        limit,
        per_second: None,
        requested_by: None,
        expected: None,
    };
    assert_eq!(store.preview_replay(request(4)).await.unwrap(), listed);
    assert_eq!(
        store.get_delivery("e3:a").await.unwrap().state,
        DeliveryState::Dead,
        "a dry run changes nothing"
    );
    // A replay held to a preview that no longer holds releases nothing.
    let mut stale = listed.clone();
    stale.swap(0, 1);
    for expected in [stale, listed[1..].to_vec()] {
        let refused = store
            .replay(
                ReplayRequest {
                    expected: Some(expected),
                    ..request(4)
                },
                T0 + 10,
            )
            .await;
        assert!(
            matches!(refused, Err(StoreError::Conflict(_))),
            "{refused:?}"
        );
    }
    assert_eq!(store.preview_replay(request(4)).await.unwrap(), listed);
    assert!(store
        .list_replays(None, ListOrder::OldestFirst, 10, None)
        .await
        .unwrap()
        .items
        .is_empty());
    // Held to the preview that holds, it releases exactly what it showed.
    let replay = store
        .replay(
            ReplayRequest {
                expected: Some(listed.clone()),
                ..request(4)
            },
            T0 + 10,
        )
        .await
        .unwrap();
    let mut released = replay.delivery_ids.clone();
    released.sort();
    let mut expected = listed.clone();
    expected.sort();
    assert_eq!(released, expected);

    // e3 dies again and is replayed again: the first replay no longer counts it.
    let again = store.claim_due(claim(T0 + 10, 10, 10)).await.unwrap();
    for c in &again {
        let t = if c.id == "e3:a" {
            Transition::Dead(DeadReason::PermanentFailure)
        } else {
            Transition::Delivered
        };
        store
            .complete(vec![completion(c, t, T0 + 11)], T0 + 11)
            .await
            .unwrap();
    }
    let audit = store.get_replay(&replay.id).await.unwrap();
    assert_eq!((audit.delivered, audit.dead), (3, 1));
    // e1 and e2 died before e3's second death: oldest first, all three go.
    let second = store.replay(request(3), T0 + 20).await.unwrap();
    assert_eq!(second.delivery_ids, ["e1:a", "e2:a", "e3:a"]);
    let audit = store.get_replay(&replay.id).await.unwrap();
    assert_eq!(
        (audit.delivered, audit.dead),
        (3, 0),
        "e3 counts in the later replay"
    );
    let redo = store.claim_due(claim(T0 + 20, 10, 10)).await.unwrap();
    let done = redo
        .iter()
        .map(|c| completion(c, Transition::Delivered, T0 + 21))
        .collect();
    store.complete(done, T0 + 21).await.unwrap();
    let later = store.get_replay(&second.id).await.unwrap();
    assert_eq!((later.delivered, later.dead), (3, 0));
    let audit = store.get_replay(&replay.id).await.unwrap();
    assert_eq!((audit.delivered, audit.dead), (3, 0));
}
