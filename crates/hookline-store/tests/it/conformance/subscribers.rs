//! Subscribers: their settings, pauses, revocation, secrets, headers and payload versions.

use super::*;

pub(crate) async fn subscribers_crud(h: &impl Harness) {
    let store = h.open().await;
    let a = store.create_subscriber(sub("a", &[]), T0).await.unwrap();
    assert_eq!(a.status, SubscriberStatus::Active);
    assert_eq!(a.created_at, T0);
    assert!(matches!(
        store.create_subscriber(sub("a", &[]), T0).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.get_subscriber("nobody").await,
        Err(StoreError::NotFound(_))
    ));
    for id in ["b", "c"] {
        store.create_subscriber(sub(id, &["x"]), T0).await.unwrap();
    }
    let first = store
        .list_subscribers(SubscriberFilter::default(), 2, None)
        .await
        .unwrap();
    assert_eq!(first.items.len(), 2);
    let rest = store
        .list_subscribers(SubscriberFilter::default(), 2, first.next_cursor.clone())
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 1);
    assert_eq!(rest.next_cursor, None);
    assert!(matches!(
        store
            .list_subscribers(SubscriberFilter::default(), 2, Some("garbage".into()))
            .await,
        Err(StoreError::Invalid(_))
    ));
    // Search: any case, in the id or the URL; `%` and `_` are themselves; pages go on.
    let containing = |text: &str| SubscriberFilter {
        tenant_id: None,
        contains: Some(text.into()),
        search_query_values: true,
    };
    let ids = |p: &Page<Subscriber>| p.items.iter().map(|s| s.id.clone()).collect::<Vec<_>>();
    let found = store
        .list_subscribers(containing("B"), 10, None)
        .await
        .unwrap();
    assert_eq!(ids(&found), ["b"]);
    let by_url = store
        .list_subscribers(containing("127.0.0.1:9/C"), 10, None)
        .await
        .unwrap();
    assert_eq!(ids(&by_url), ["c"]);
    let by_path = store
        .list_subscribers(containing(":9/"), 1, None)
        .await
        .unwrap();
    let next = store
        .list_subscribers(containing(":9/"), 10, by_path.next_cursor.clone())
        .await
        .unwrap();
    assert_eq!([ids(&by_path), ids(&next)].concat().len(), 3);
    for literal in ["%", "_", "\\"] {
        let none = store
            .list_subscribers(containing(literal), 10, None)
            .await
            .unwrap();
        assert!(
            none.items.is_empty(),
            "{literal:?} matched {:?}",
            ids(&none)
        );
    }

    let patched = store
        .update_subscriber(
            "b",
            SubscriberPatch {
                url: Some("http://127.0.0.1:9/new".into()),
                event_types: Some(vec![]),
                status: Some(SubscriberStatus::Paused),
                ..Default::default()
            },
            T0 + 1,
        )
        .await
        .unwrap();
    assert_eq!(patched.url, "http://127.0.0.1:9/new");
    assert!(patched.event_types.is_empty());
    assert_eq!(patched.status, SubscriberStatus::Paused);
    assert_eq!(patched.updated_at, T0 + 1);

    let revoked = store.revoke_subscriber("b", T0 + 2).await.unwrap();
    assert_eq!(revoked.status, SubscriberStatus::Revoked);
    assert!(matches!(
        store
            .update_subscriber("b", SubscriberPatch::default(), T0 + 3)
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.revoke_subscriber("nobody", T0).await,
        Err(StoreError::NotFound(_))
    ));
}

/// A URL's query values may be credentials: a search matches them only when asked to (for
/// callers who are shown them), and the URL before its query and the id always.
pub(crate) async fn a_search_matches_query_values_only_when_asked(h: &impl Harness) {
    let store = h.open().await;
    let keyed = NewSubscriber {
        url: "http://127.0.0.1:9/hooks?api_key=sk_live_Secret&v=2".into(),
        ..sub("keyed", &[])
    };
    store.create_subscriber(keyed, T0).await.unwrap();
    store
        .create_subscriber(sub("plain", &[]), T0)
        .await
        .unwrap();
    let search = |text: &str, search_query_values: bool| SubscriberFilter {
        tenant_id: None,
        contains: Some(text.into()),
        search_query_values,
    };
    let ids = |p: Page<Subscriber>| p.items.into_iter().map(|s| s.id).collect::<Vec<_>>();
    for (text, with_values, found) in [
        ("sk_live_secret", false, vec![]),
        ("sk_live_secret", true, vec!["keyed"]),
        ("/HOOKS", false, vec!["keyed"]),
        ("keyed", false, vec!["keyed"]),
        ("127.0.0.1:9/", false, vec!["keyed", "plain"]),
    ] {
        let page = store
            .list_subscribers(search(text, with_values), 10, None)
            .await
            .unwrap();
        assert_eq!(
            ids(page),
            found,
            "{text:?}, query values searched: {with_values}"
        );
    }
}

/// An id or a filter with a NUL byte (an outsider's `%00`) finds nothing or is refused as
/// the caller's input; it is never a store failure (a 500, and the store-error alert).
pub(crate) async fn a_nul_byte_in_an_id_is_the_callers_error_never_the_stores(h: &impl Harness) {
    let store = h.open().await;
    store.create_subscriber(sub("a", &[]), T0).await.unwrap();
    accepted(&*store, event("e", "t"), T0).await;
    let callers = |r: std::result::Result<(), StoreError>| match r {
        Ok(()) | Err(StoreError::NotFound(_)) | Err(StoreError::Invalid(_)) => {}
        Err(other) => panic!("a NUL byte failed the store: {other:?}"),
    };
    callers(store.get_subscriber("a\0b").await.map(|_| ()));
    callers(store.get_event("e\0").await.map(|_| ()));
    callers(store.get_delivery("e:a\0").await.map(|_| ()));
    let filter = DeliveryFilter {
        subscriber_id: Some("a\0".into()),
        ..Default::default()
    };
    callers(store.list_deliveries(filter, 10, None).await.map(|_| ()));
    // A search for a NUL is refused on every backend, never a match of everyone.
    let search = SubscriberFilter {
        contains: Some("\0".into()),
        ..Default::default()
    };
    let refused = store.list_subscribers(search, 10, None).await;
    assert!(
        matches!(refused, Err(StoreError::Invalid(ref m)) if m.contains("NUL")),
        "{refused:?}"
    );
    // And nothing changed.
    assert_eq!(store.get_subscriber("a").await.unwrap().id, "a");
}

pub(crate) async fn pause_holds_without_spending_attempts(h: &impl Harness) {
    let store = h.open().await;
    store.create_subscriber(sub("a", &[]), T0).await.unwrap();
    store.create_subscriber(sub("b", &[]), T0).await.unwrap();
    let pause = SubscriberPatch {
        status: Some(SubscriberStatus::Paused),
        ..Default::default()
    };
    store
        .update_subscriber("a", pause.clone(), T0)
        .await
        .unwrap();
    accepted(&*store, event("e1", "t"), T0).await;
    let claimed = store.claim_due(claim(T0, 10, 10)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, "e1:b");
    // Paused after its deliveries were created: they are parked when met.
    store.update_subscriber("b", pause, T0).await.unwrap();
    accepted(&*store, event("e2", "t"), T0 + 1).await;
    assert!(store
        .claim_due(claim(T0 + 2, 10, 10))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.get_delivery("e1:a").await.unwrap().attempts, 0);
    assert_eq!(
        store.get_delivery("e2:b").await.unwrap().state,
        DeliveryState::Scheduled
    );
    let resume = SubscriberPatch {
        status: Some(SubscriberStatus::Active),
        ..Default::default()
    };
    store
        .update_subscriber("a", resume.clone(), T0 + 3)
        .await
        .unwrap();
    store.update_subscriber("b", resume, T0 + 3).await.unwrap();
    let mut ids: Vec<String> = store
        .claim_due(claim(T0 + 3, 10, 10))
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    ids.sort();
    assert_eq!(ids, ["e1:a", "e2:a", "e2:b"]);
}

/// What a process keeps per subscriber follows the live ones: the revoked and the unknown
/// among those it asks about, wherever the revocation was made.
pub(crate) async fn gone_subscribers_are_named(h: &impl Harness) {
    let store = h.open().await;
    for id in ["live", "revoked"] {
        store.create_subscriber(sub(id, &[]), T0).await.unwrap();
    }
    store.revoke_subscriber("revoked", T0).await.unwrap();
    let asked = ["live", "revoked", "never"].map(String::from).to_vec();
    let mut gone = store.gone_among(asked).await.unwrap();
    gone.sort();
    assert_eq!(gone, ["never", "revoked"]);
    assert!(store.gone_among(Vec::new()).await.unwrap().is_empty());
}

pub(crate) async fn revocation_kills_pending_and_stops_fan_out(h: &impl Harness) {
    let store = h.open().await;
    store.create_subscriber(sub("a", &[]), T0).await.unwrap();
    store.create_subscriber(sub("b", &[]), T0).await.unwrap();
    accepted(&*store, event("e1", "t"), T0).await;
    accepted(&*store, event("e2", "t"), T0 + 1).await;
    // e1:a and e1:b in flight, e2:* scheduled.
    let inflight = store.claim_due(claim(T0, 10, 10)).await.unwrap();
    assert_eq!(inflight.len(), 2);
    store.revoke_subscriber("a", T0 + 2).await.unwrap();
    let d = store.get_delivery("e2:a").await.unwrap();
    assert_eq!(d.state, DeliveryState::Dead);
    assert_eq!(d.dead_reason, Some(DeadReason::SubscriptionRevoked));
    assert_eq!(d.dead_at, Some(T0 + 2));
    // The in-flight attempt fails retryably: it cannot be rescheduled to a revoked subscriber.
    let a = inflight.iter().find(|c| c.id == "e1:a").unwrap();
    store
        .complete(
            vec![completion(
                a,
                Transition::Reschedule { run_at: T0 + 10 },
                T0 + 3,
            )],
            T0 + 3,
        )
        .await
        .unwrap();
    let d = store.get_delivery("e1:a").await.unwrap();
    assert_eq!(d.dead_reason, Some(DeadReason::SubscriptionRevoked));
    assert_eq!(accepted(&*store, event("e3", "t"), T0 + 4).await, 1);

    // A 410 from b revokes b along with the completion.
    let b = inflight.iter().find(|c| c.id == "e1:b").unwrap();
    let mut gone = completion(b, Transition::Dead(DeadReason::PermanentFailure), T0 + 5);
    gone.record.status = Some(410);
    gone.revoke_subscriber = true;
    store.complete(vec![gone], T0 + 5).await.unwrap();
    assert_eq!(
        store.get_subscriber("b").await.unwrap().status,
        SubscriberStatus::Revoked
    );
    assert_eq!(
        store.get_delivery("e1:b").await.unwrap().dead_reason,
        Some(DeadReason::PermanentFailure)
    );
    for id in ["e2:b", "e3:b"] {
        assert_eq!(
            store.get_delivery(id).await.unwrap().dead_reason,
            Some(DeadReason::SubscriptionRevoked),
            "{id}"
        );
    }
    assert!(store
        .claim_due(claim(T0 + 100, 10, 10))
        .await
        .unwrap()
        .is_empty());
}

/// After a 410 revokes a subscriber, a retryable failure of its next attempt in the same
/// batch of completions dies revoked, rather than waiting for a retry that can never be
/// sent. (SQLite completes row by row and reads the subscriber as the completion before
/// left it; PostgreSQL ends the batch's rows in one statement, then revokes.)
pub(crate) async fn a_410_revokes_for_the_completions_after_it_in_its_batch(h: &impl Harness) {
    let store = h.open().await;
    store.create_subscriber(sub("b", &[]), T0).await.unwrap();
    accepted(&*store, event("e1", "t"), T0).await;
    accepted(&*store, event("e2", "t"), T0).await;
    // The claim reads the subscriber as active.
    let inflight = store.claim_due(claim(T0, 10, 10)).await.unwrap();
    assert_eq!(inflight.len(), 2);
    let of = |id: &str| inflight.iter().find(|c| c.id == id).unwrap();
    let mut gone = completion(
        of("e1:b"),
        Transition::Dead(DeadReason::PermanentFailure),
        T0 + 1,
    );
    gone.record.status = Some(410);
    gone.revoke_subscriber = true;
    let failed = completion(
        of("e2:b"),
        Transition::Reschedule { run_at: T0 + 10 },
        T0 + 1,
    );
    assert_eq!(
        store.complete(vec![gone, failed], T0 + 1).await.unwrap(),
        [CompletionResult::Applied, CompletionResult::Applied]
    );
    let after = store.get_delivery("e2:b").await.unwrap();
    assert_eq!(
        (after.state, after.dead_reason),
        (DeliveryState::Dead, Some(DeadReason::SubscriptionRevoked))
    );
    assert!(store
        .claim_due(claim(T0 + 100, 10, 10))
        .await
        .unwrap()
        .is_empty());
}

pub(crate) async fn headers_go_with_every_claim_and_patches_replace_them(h: &impl Harness) {
    let headers = |pairs: &[(&str, &str)]| {
        SubscriberHeaders(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    };
    let store = h.open().await;
    let basic = headers(&[("authorization", "Basic dTpw"), ("x-tenant", "t-7")]);
    let created = store
        .create_subscriber(
            NewSubscriber {
                headers: basic.clone(),
                ..sub("a", &[])
            },
            T0,
        )
        .await
        .unwrap();
    assert_eq!(created.headers, basic);
    store.create_subscriber(sub("b", &[]), T0).await.unwrap();
    accepted(&*store, event("e1", "t"), T0).await;
    let mut claimed = store.claim_due(claim(T0, 10, 10)).await.unwrap();
    claimed.sort_by(|x, y| x.id.cmp(&y.id));
    assert_eq!(claimed[0].destination.headers, basic);
    assert_eq!(claimed[1].destination.headers, SubscriberHeaders::default());
    // Values never reach Debug output (logs).
    assert_eq!(format!("{basic:?}"), r#"{"authorization", "x-tenant"}"#);

    let other = headers(&[("x-api-key", "k2")]);
    let patch = |h: Option<SubscriberHeaders>| SubscriberPatch {
        headers: h,
        ..Default::default()
    };
    let replaced = store
        .update_subscriber("a", patch(Some(other.clone())), T0 + 1)
        .await
        .unwrap();
    assert_eq!(replaced.headers, other);
    // A patch that does not name them keeps them, across a reopen too.
    store
        .update_subscriber("a", patch(None), T0 + 2)
        .await
        .unwrap();
    drop(store);
    let store = h.open().await;
    assert_eq!(store.get_subscriber("a").await.unwrap().headers, other);
    let cleared = store
        .update_subscriber("a", patch(Some(SubscriberHeaders::default())), T0 + 3)
        .await
        .unwrap();
    assert_eq!(cleared.headers, SubscriberHeaders::default());
}

pub(crate) async fn rotation_keeps_the_previous_secret_for_its_grace(h: &impl Harness) {
    let store = h.open().await;
    let old = store
        .create_subscriber(sub("a", &[]), T0)
        .await
        .unwrap()
        .secret;
    let new = "whsec_bmV3LXNlY3JldC1uZXctc2VjcmV0LW5ldy1zZWNyZXQ=".to_owned();
    let rotated = store
        .rotate_secret("a", new.clone(), T0 + 1_000, T0)
        .await
        .unwrap();
    assert_eq!(rotated.secret, new);
    assert_eq!(rotated.previous_secret.as_deref(), Some(old.as_str()));
    assert_eq!(rotated.previous_secret_until, Some(T0 + 1_000));
    accepted(&*store, event("e1", "t"), T0).await;
    accepted(&*store, event("e2", "t"), T0).await;
    let during = store.claim_due(claim(T0 + 999, 1, 10)).await.unwrap();
    assert_eq!(during[0].destination.secrets, [new.clone(), old.clone()]);
    let after = store.claim_due(claim(T0 + 1_000, 1, 10)).await.unwrap();
    assert_eq!(after[0].destination.secrets, std::slice::from_ref(&new));
    // No grace: the old secret stops at once.
    let again = store.rotate_secret("a", old.clone(), T0, T0).await.unwrap();
    assert_eq!(
        (again.previous_secret, again.previous_secret_until),
        (None, None)
    );
    assert!(matches!(
        store.rotate_secret("nobody", new.clone(), T0, T0).await,
        Err(StoreError::NotFound(_))
    ));
    store.revoke_subscriber("a", T0).await.unwrap();
    assert!(matches!(
        store.rotate_secret("a", new, T0, T0).await,
        Err(StoreError::Conflict(_))
    ));
}

pub(crate) async fn payload_versions_follow_each_subscribers_pin(h: &impl Harness) {
    let store = h.open().await;
    for (id, pin) in [
        ("latest", None),
        ("v1", Some(1)),
        ("v5", Some(5)),
        ("v0", Some(0)),
    ] {
        let mut s = sub(id, &[]);
        s.payload_version = pin;
        let created = store.create_subscriber(s, T0).await.unwrap();
        assert_eq!(created.payload_version, pin);
    }
    let mut e = NewEvent::single("e", "t", r#"{"v":2}"#, 2);
    e.earlier_payloads = vec![(1, r#"{"v":1}"#.into())];
    let receipt = match store.publish(e.clone(), T0).await.unwrap() {
        PublishOutcome::Accepted(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!((receipt.deliveries, receipt.unversioned), (4, 1));
    let again = store.publish(e.clone(), T0 + 1).await.unwrap();
    assert_eq!(again, PublishOutcome::AlreadyAccepted(receipt));
    let mut changed = e.clone();
    changed.earlier_payloads = vec![(1, r#"{"v":"one"}"#.into())];
    assert_eq!(
        store.publish(changed, T0).await.unwrap(),
        PublishOutcome::Conflict
    );
    let stored = store.get_event("e").await.unwrap();
    assert_eq!(stored.earlier_payloads, e.earlier_payloads);
    assert_eq!((stored.payload_version, stored.deliveries), (2, 4));

    let mut claimed = store.claim_due(claim(T0, 10, 10)).await.unwrap();
    claimed.sort_by(|a, b| a.id.cmp(&b.id));
    let sent: Vec<(&str, i64, &str)> = claimed
        .iter()
        .map(|c| {
            (
                c.id.as_str(),
                c.event.payload_version,
                c.event.payload.as_str(),
            )
        })
        .collect();
    assert_eq!(
        sent,
        [
            ("e:latest", 2, r#"{"v":2}"#),
            ("e:v1", 1, r#"{"v":1}"#),
            ("e:v5", 2, r#"{"v":2}"#),
        ]
    );
    let dead = store.get_delivery("e:v0").await.unwrap();
    assert_eq!(dead.state, DeliveryState::Dead);
    assert_eq!(dead.dead_reason, Some(DeadReason::PermanentFailure));
    assert_eq!(
        dead.dead_error.as_deref(),
        Some("no payload version at or below 0")
    );
    assert_eq!((dead.payload_version, dead.attempts), (None, 0));
    assert!(dead.attempt_history.is_empty());
    assert_eq!(
        store.get_delivery("e:v1").await.unwrap().payload_version,
        Some(1)
    );

    // v1 fails on version 1 and is moved to version 2; v0 is still pinned below both.
    let done = claimed
        .iter()
        .map(|c| {
            let t = if c.id == "e:v1" {
                Transition::Dead(DeadReason::PermanentFailure)
            } else {
                Transition::Delivered
            };
            completion(c, t, T0 + 10)
        })
        .collect();
    store.complete(done, T0 + 10).await.unwrap();
    let letters = store
        .list_dead_letters(
            DeadLetterFilter {
                tenant_id: None,
                reason: Some(DeadReason::PermanentFailure),
                subscriber_id: None,
            },
            10,
            None,
        )
        .await
        .unwrap();
    let mut versions: Vec<(&str, Option<i64>, Option<&str>)> = letters
        .items
        .iter()
        .map(|d| {
            (
                d.subscriber_id.as_str(),
                d.payload_version,
                d.dead_error.as_deref(),
            )
        })
        .collect();
    versions.sort();
    assert_eq!(
        versions,
        [
            ("v0", None, Some("no payload version at or below 0")),
            ("v1", Some(1), None),
        ]
    );
    let repin = |v: i64| SubscriberPatch {
        payload_version: Some(Some(v)),
        ..Default::default()
    };
    store
        .update_subscriber("v1", repin(2), T0 + 20)
        .await
        .unwrap();
    let replay = store
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
            T0 + 30,
        )
        .await
        .unwrap();
    assert_eq!(replay.selected, 2);
    let again = store.claim_due(claim(T0 + 30, 10, 10)).await.unwrap();
    assert_eq!(
        again.len(),
        1,
        "v0 has still no version and is not released"
    );
    assert_eq!(
        (again[0].id.as_str(), again[0].event.payload_version),
        ("e:v1", 2)
    );
    let v0 = store.get_delivery("e:v0").await.unwrap();
    assert_eq!(v0.state, DeliveryState::Dead);
    assert_eq!(v0.dead_at, Some(T0 + 30));
    let audit = store.get_replay(&replay.id).await.unwrap();
    assert_eq!((audit.delivered, audit.dead), (0, 1));

    // Pinned above the latest takes the latest; with a single version, a pin below it
    // (v1 is pinned to 2 now) has nothing.
    store
        .update_subscriber("v0", repin(7), T0 + 40)
        .await
        .unwrap();
    let receipt = match store
        .publish(NewEvent::single("f", "t", "{}", 3), T0 + 40)
        .await
        .unwrap()
    {
        PublishOutcome::Accepted(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!((receipt.deliveries, receipt.unversioned), (4, 1));
    assert_eq!(
        store.get_delivery("f:v0").await.unwrap().payload_version,
        Some(3)
    );
    assert_eq!(
        store
            .get_delivery("f:v1")
            .await
            .unwrap()
            .dead_error
            .as_deref(),
        Some("no payload version at or below 2")
    );
}
