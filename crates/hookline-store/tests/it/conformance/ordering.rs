//! Ordering keys: a subscriber's deliveries of one key go one at a time, in publish order.

use super::*;

fn keyed(id: &str, key: Option<&str>) -> NewEvent {
    NewEvent {
        ordering_key: key.map(str::to_owned),
        ..event(id, "shipment.updated")
    }
}

/// Claims everything due at `now` and answers the ids, sorted.
async fn claim_ids(store: &dyn Store, now: i64) -> (Vec<ClaimedDelivery>, Vec<String>) {
    let claimed = store.claim_due(claim(now, 100, 100)).await.unwrap();
    let mut ids: Vec<String> = claimed.iter().map(|c| c.id.clone()).collect();
    ids.sort();
    (claimed, ids)
}

async fn end(store: &dyn Store, c: &ClaimedDelivery, transition: Transition, now: i64) {
    let done = store
        .complete(vec![completion(c, transition, now)], now)
        .await
        .unwrap();
    assert_eq!(done, [CompletionResult::Applied]);
}

/// A key's later delivery waits (`waiting_on: ordering`) while an earlier one is in flight or
/// waiting to retry, and goes when it ends, delivered or dead; each subscriber has its own
/// line, and deliveries without a key or of another key pass by.
pub(crate) async fn a_key_s_deliveries_go_one_at_a_time_in_publish_order(h: &impl Harness) {
    let store = h.open().await;
    for id in ["s", "t"] {
        store.create_subscriber(sub(id, &[]), T0).await.unwrap();
    }
    for (id, key) in [
        ("e1", Some("SHP-1")),
        ("e2", Some("SHP-1")),
        ("e3", Some("SHP-1")),
        ("free", None),
        ("other", Some("SHP-2")),
    ] {
        assert_eq!(accepted(&*store, keyed(id, key), T0).await, 2);
    }
    let waiting = store.get_delivery("e2:s").await.unwrap();
    assert_eq!(waiting.state, DeliveryState::Scheduled);
    assert_eq!(waiting.waiting_on, Some(WaitingOn::Ordering));
    let (claimed, ids) = claim_ids(&*store, T0).await;
    assert_eq!(
        ids,
        ["e1:s", "e1:t", "free:s", "free:t", "other:s", "other:t"]
    );
    let of = |id: &str| claimed.iter().find(|c| c.id == id).unwrap().clone();
    // A retry keeps its place: the key waits for it.
    end(
        &*store,
        &of("e1:s"),
        Transition::Reschedule { run_at: T0 + 100 },
        T0 + 1,
    )
    .await;
    end(&*store, &of("e1:t"), Transition::Delivered, T0 + 1).await;
    let (claimed, ids) = claim_ids(&*store, T0 + 2).await;
    assert_eq!(ids, ["e2:t"], "t's line moves on; s's waits for its retry");
    assert_eq!(
        store.get_delivery("e2:s").await.unwrap().waiting_on,
        Some(WaitingOn::Ordering)
    );
    end(&*store, &claimed[0], Transition::Delivered, T0 + 3).await;
    let (claimed, ids) = claim_ids(&*store, T0 + 100).await;
    assert_eq!(ids, ["e1:s", "e3:t"]);
    let of = |id: &str| claimed.iter().find(|c| c.id == id).unwrap().clone();
    // Dead ends a delivery as delivered does: the next goes.
    end(
        &*store,
        &of("e1:s"),
        Transition::Dead(DeadReason::PermanentFailure),
        T0 + 101,
    )
    .await;
    let (claimed, ids) = claim_ids(&*store, T0 + 102).await;
    assert_eq!(ids, ["e2:s"]);
    assert_eq!(store.get_delivery("e2:s").await.unwrap().waiting_on, None);
    end(&*store, &claimed[0], Transition::Delivered, T0 + 103).await;
    let (_, ids) = claim_ids(&*store, T0 + 104).await;
    assert_eq!(ids, ["e3:s"]);
    // A key seen again after its line emptied starts a new one at once.
    end(&*store, &of("e3:t"), Transition::Delivered, T0 + 105).await;
    accepted(&*store, keyed("e4", Some("SHP-1")), T0 + 106).await;
    let (_, ids) = claim_ids(&*store, T0 + 106).await;
    assert_eq!(ids, ["e4:t"], "s still has e3 in flight");
}

/// A delivery waiting behind its key still ends with its window (`window_expired`, waiting on
/// `ordering`), and one behind it goes when the one ahead ends; a paused subscriber's next
/// delivery is released held and waits for the resume; a resume leaves a key's line alone.
pub(crate) async fn a_key_s_line_keeps_windows_and_pauses(h: &impl Harness) {
    let store = h.open().await;
    store.create_subscriber(sub("s", &[]), T0).await.unwrap();
    accepted(&*store, keyed("e1", Some("K")), T0).await;
    accepted(&*store, keyed("e2", Some("K")), T0 + 10).await;
    accepted(&*store, keyed("e3", Some("K")), T0 + 1_000).await;
    let (claimed, ids) = claim_ids(&*store, T0 + 1_000).await;
    assert_eq!(ids, ["e1:s"]);
    // e2's window (500 ms) ends while e1 is in flight; e3's has not.
    let sweep = WindowSweep {
        now: T0 + 600,
        window_ms: 500,
        caps: caps(10),
        limit: 1000,
    };
    assert_eq!(store.expire_windows(sweep).await.unwrap().len(), 1);
    let e2 = store.get_delivery("e2:s").await.unwrap();
    assert_eq!(e2.dead_reason, Some(DeadReason::WindowExpired));
    assert_eq!(e2.waiting_on, Some(WaitingOn::Ordering));
    assert!(claim_ids(&*store, T0 + 1_001).await.1.is_empty());
    // Paused: e1 ends, e3 is released but held for the resume.
    let status = |status| SubscriberPatch {
        status: Some(status),
        ..Default::default()
    };
    store
        .update_subscriber("s", status(SubscriberStatus::Paused), T0 + 1_002)
        .await
        .unwrap();
    end(&*store, &claimed[0], Transition::Delivered, T0 + 1_003).await;
    assert!(claim_ids(&*store, T0 + 1_004).await.1.is_empty());
    assert_eq!(store.get_delivery("e3:s").await.unwrap().waiting_on, None);
    accepted(&*store, keyed("e4", Some("K")), T0 + 1_200).await;
    store
        .update_subscriber("s", status(SubscriberStatus::Active), T0 + 1_006)
        .await
        .unwrap();
    let (claimed, ids) = claim_ids(&*store, T0 + 1_300).await;
    assert_eq!(ids, ["e3:s"], "the resume released e3, not e4 behind it");
    assert_eq!(
        store.get_delivery("e4:s").await.unwrap().waiting_on,
        Some(WaitingOn::Ordering)
    );
    // The head's window ends while it waits to retry: the next goes.
    end(
        &*store,
        &claimed[0],
        Transition::Reschedule { run_at: T0 + 5_000 },
        T0 + 1_301,
    )
    .await;
    let sweep = WindowSweep {
        now: T0 + 1_600,
        ..sweep
    };
    assert_eq!(store.expire_windows(sweep).await.unwrap().len(), 1);
    assert_eq!(
        store.get_delivery("e3:s").await.unwrap().dead_reason,
        Some(DeadReason::WindowExpired)
    );
    let (_, ids) = claim_ids(&*store, T0 + 1_601).await;
    assert_eq!(ids, ["e4:s"]);
}

/// A replayed dead letter of a key is an operator's repair, sent when released: neither held
/// behind the key's delivery on its way nor holding the key's later ones.
pub(crate) async fn a_replay_leaves_its_key_s_line(h: &impl Harness) {
    let store = h.open().await;
    store.create_subscriber(sub("s", &[]), T0).await.unwrap();
    accepted(&*store, keyed("e1", Some("K")), T0).await;
    accepted(&*store, keyed("e2", Some("K")), T0).await;
    let (claimed, _) = claim_ids(&*store, T0).await;
    end(
        &*store,
        &claimed[0],
        Transition::Dead(DeadReason::PermanentFailure),
        T0 + 1,
    )
    .await;
    let (e2, ids) = claim_ids(&*store, T0 + 2).await;
    assert_eq!(ids, ["e2:s"]);
    let replay = ReplayRequest {
        tenant_id: None,
        reason: DeadReason::PermanentFailure,
        subscriber_id: None,
        limit: 10,
        per_second: None,
        requested_by: None,
        expected: None,
    };
    store.replay(replay, T0 + 3).await.unwrap();
    let (replayed, ids) = claim_ids(&*store, T0 + 4).await;
    assert_eq!(ids, ["e1:s"], "beside e2, in flight");
    accepted(&*store, keyed("e3", Some("K")), T0 + 5).await;
    end(&*store, &e2[0], Transition::Delivered, T0 + 6).await;
    let (_, ids) = claim_ids(&*store, T0 + 7).await;
    assert_eq!(ids, ["e3:s"], "behind e2 only, not the replayed e1");
    end(&*store, &replayed[0], Transition::Delivered, T0 + 8).await;
}
