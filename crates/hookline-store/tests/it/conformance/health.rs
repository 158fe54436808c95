//! Subscriber health: the failing streak kept from completions, the watched rows, what was told
//! (compare-and-set), auto-disable, finished replays and the dead-letter inflow.

use super::*;
use hookline_store::health::Condition;

/// Publishes one event to `id` (its subscriber takes its own id as its type) and completes its attempt into `transition` at `now`.
async fn attempt(store: &dyn Store, id: &str, n: u32, transition: Transition, now: i64) {
    accepted(store, event(&format!("e-{id}-{n}"), id), now).await;
    let claimed = store.claim_due(claim(now, 100, 100)).await.unwrap();
    let mine: Vec<_> = claimed
        .iter()
        .filter(|c| c.destination.subscriber_id == id)
        .map(|c| completion(c, transition, now))
        .collect();
    assert_eq!(mine.len(), 1, "one delivery to {id}");
    store.complete(mine, now).await.unwrap();
}

async fn watched(store: &dyn Store) -> Vec<(String, Option<Condition>)> {
    store
        .watched_subscribers(None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|w| (w.subscriber.id, w.told))
        .collect()
}

pub async fn failures_are_watched_told_once_and_a_success_ends_them<H: Harness>(h: &H) {
    let store = h.open().await;
    for id in ["ok", "bad"] {
        store.create_subscriber(sub(id, &[id]), T0).await.unwrap();
    }
    let dead = Transition::Dead(DeadReason::PermanentFailure);
    // Permanent failures (a 404 each) count, though the breaker stays closed.
    attempt(store.as_ref(), "bad", 1, dead, T0 + 1).await;
    attempt(store.as_ref(), "bad", 2, dead, T0 + 2).await;
    attempt(store.as_ref(), "ok", 1, Transition::Delivered, T0 + 3).await;
    let bad = store.get_subscriber("bad").await.unwrap();
    assert_eq!((bad.failing.since, bad.failing.attempts), (Some(T0 + 1), 2));
    assert_eq!(bad.breaker.consecutive_failures, 0);
    assert_eq!(
        store.get_subscriber("ok").await.unwrap().failing.since,
        None
    );
    assert_eq!(watched(store.as_ref()).await, [("bad".to_owned(), None)]);
    // Told once: a second teller that read the same `told` loses.
    let failing = Some((Condition::Failing, T0 + 1));
    assert!(store.set_told("bad", None, failing).await.unwrap());
    assert!(!store.set_told("bad", None, failing).await.unwrap());
    assert_eq!(
        watched(store.as_ref()).await,
        [("bad".to_owned(), Some(Condition::Failing))]
    );
    // A success ends the streak; the row stays watched until its recovery is told.
    attempt(store.as_ref(), "bad", 3, Transition::Delivered, T0 + 4).await;
    let bad = store.get_subscriber("bad").await.unwrap();
    assert_eq!((bad.failing.since, bad.failing.attempts), (None, 0));
    assert_eq!(watched(store.as_ref()).await.len(), 1);
    assert!(store
        .set_told("bad", Some(Condition::Failing), None)
        .await
        .unwrap());
    assert!(watched(store.as_ref()).await.is_empty());
    // A revocation is watched until told, with why it happened.
    store.revoke_subscriber("ok", T0 + 5).await.unwrap();
    let ok = store.get_subscriber("ok").await.unwrap();
    assert_eq!(ok.status_reason, Some(StatusReason::Deleted));
    assert_eq!(
        watched(store.as_ref()).await,
        [("ok".to_owned(), None::<Condition>)]
    );
    assert!(store
        .set_told("ok", None, Some((Condition::Revoked, T0 + 5)))
        .await
        .unwrap());
    assert!(watched(store.as_ref()).await.is_empty());
}

pub async fn failing_subscribers_are_paused_after_disable_after_and_resume_fresh<H: Harness>(
    h: &H,
) {
    let store = h.open().await;
    for id in ["old", "few", "new", "spared", "paused"] {
        store.create_subscriber(sub(id, &[id]), T0).await.unwrap();
    }
    let dead = Transition::Dead(DeadReason::PermanentFailure);
    for (id, first) in [
        ("old", 10),
        ("few", 10),
        ("spared", 10),
        ("paused", 10),
        ("new", 20),
    ] {
        attempt(store.as_ref(), id, 1, dead, T0 + first).await;
        if id != "few" {
            attempt(store.as_ref(), id, 2, dead, T0 + first + 1).await;
        }
    }
    let pause = SubscriberPatch {
        status: Some(SubscriberStatus::Paused),
        ..Default::default()
    };
    let paused = store
        .update_subscriber("paused", pause.clone(), T0 + 30)
        .await
        .unwrap();
    assert_eq!(paused.status_reason, Some(StatusReason::Paused));
    let disable = |cutoff: i64, now: i64| hookline_store::health::AutoDisable {
        cutoff,
        failing_after: 2,
        except: "spared".into(),
        now,
    };
    // Failing since T0 + 10 or earlier with 2 failures in a row: paused, but the one excepted,
    // the one already paused and the one with a single failure.
    let disabled = store.auto_disable(disable(T0 + 15, T0 + 40)).await.unwrap();
    let ids: Vec<&str> = disabled.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["old"]);
    let old = store.get_subscriber("old").await.unwrap();
    assert_eq!(
        (old.status, old.status_reason, old.updated_at),
        (
            SubscriberStatus::Paused,
            Some(StatusReason::AutoDisabled),
            T0 + 40
        )
    );
    assert!(store
        .auto_disable(disable(T0 + 15, T0 + 41))
        .await
        .unwrap()
        .is_empty());
    // Its deliveries wait as any paused subscriber's.
    accepted(store.as_ref(), event("after", "old"), T0 + 50).await;
    let claimed = store.claim_due(claim(T0 + 50, 100, 100)).await.unwrap();
    assert!(claimed.iter().all(|c| c.destination.subscriber_id != "old"));
    // Resumed, it is failing still, its streak counted from the resume.
    let resume = SubscriberPatch {
        status: Some(SubscriberStatus::Active),
        ..Default::default()
    };
    let old = store
        .update_subscriber("old", resume, T0 + 60)
        .await
        .unwrap();
    assert_eq!(
        (old.status_reason, old.failing.since, old.failing.attempts),
        (None, Some(T0 + 60), 2)
    );
    // Only new is failing since T0 + 59 or earlier now: old's streak counts from its resume.
    let again = store.auto_disable(disable(T0 + 59, T0 + 61)).await.unwrap();
    let ids: Vec<&str> = again.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["new"]);
    // An operator's pause of a subscriber hookline paused is the operator's.
    let new = store
        .update_subscriber("new", pause, T0 + 63)
        .await
        .unwrap();
    assert_eq!(new.status_reason, Some(StatusReason::Paused));
}

pub async fn finished_replays_and_the_dead_letter_inflow_are_read<H: Harness>(h: &H) {
    let store = h.open().await;
    for id in ["a", "ops"] {
        store.create_subscriber(sub(id, &["t"]), T0).await.unwrap();
    }
    for i in 0..3 {
        accepted(store.as_ref(), event(&format!("e{i}"), "t"), T0).await;
    }
    assert_eq!(
        kill_all(store.as_ref(), T0 + 1, DeadReason::AttemptsExhausted).await,
        6
    );
    let inflow = store.dead_letter_inflow(T0, "ops").await.unwrap();
    assert_eq!(inflow, [(DeadReason::AttemptsExhausted, 3)]);
    assert!(store
        .dead_letter_inflow(T0 + 2, "ops")
        .await
        .unwrap()
        .is_empty());
    let replay = store
        .replay(
            ReplayRequest {
                tenant_id: None,
                reason: DeadReason::AttemptsExhausted,
                subscriber_id: Some("a".into()),
                limit: 10,
                per_second: None,
                requested_by: None,
                expected: None,
            },
            T0 + 5,
        )
        .await
        .unwrap();
    // Not finished while any of its deliveries is on its way.
    assert!(store.finished_replays(T0, 10).await.unwrap().is_empty());
    let claimed = store.claim_due(claim(T0 + 6, 100, 100)).await.unwrap();
    let (first, rest) = claimed.split_at(1);
    let done = |c: &[ClaimedDelivery]| {
        c.iter()
            .map(|c| completion(c, Transition::Delivered, T0 + 6))
            .collect()
    };
    store.complete(done(first), T0 + 6).await.unwrap();
    assert!(store.finished_replays(T0, 10).await.unwrap().is_empty());
    store.complete(done(rest), T0 + 6).await.unwrap();
    let finished = store.finished_replays(T0, 10).await.unwrap();
    assert_eq!(finished.len(), 1);
    assert_eq!((finished[0].selected, finished[0].delivered), (3, 3));
    assert!(store.set_replay_finished(&replay.id, T0 + 7).await.unwrap());
    assert!(!store.set_replay_finished(&replay.id, T0 + 8).await.unwrap());
    assert!(store.finished_replays(T0, 10).await.unwrap().is_empty());
}
