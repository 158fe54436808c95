//! Resends: new deliveries of published events to one subscriber, and their audit.

use super::*;

fn resend(subscriber: &str, since: i64, until: i64, limit: u32) -> ResendRequest {
    ResendRequest {
        subscriber_id: subscriber.into(),
        since,
        until,
        event_types: Vec::new(),
        limit,
        per_second: None,
        requested_by: Some("ops".into()),
        expected: None,
    }
}

fn ids(strings: &[&str]) -> Vec<String> {
    strings.iter().map(|s| (*s).to_owned()).collect()
}

/// Delivers everything due, so what a resend makes stands beside delivered originals.
async fn deliver_all(store: &dyn Store, now: i64) -> Vec<ClaimedDelivery> {
    let claimed = store.claim_due(claim(now, 1000, 1000)).await.unwrap();
    let done = claimed
        .iter()
        .map(|c| completion(c, Transition::Delivered, now))
        .collect();
    store.complete(done, now).await.unwrap();
    claimed
}

/// A resend selects the events of its subscriber's tenant accepted in `[since, until)`, oldest
/// first, whose type the subscriber takes now and the request names, up to its limit; an event
/// with no version at or below the subscriber's pin is not selected.
pub(crate) async fn a_resend_selects_by_time_type_and_tenant(h: &impl Harness) {
    let store = h.open().await;
    store
        .create_tenant(
            NewTenant {
                id: "acme".into(),
                name: None,
                max_subscribers: None,
                max_events_per_second: None,
            },
            T0,
        )
        .await
        .unwrap();
    store
        .create_subscriber(sub("s", &["shipment.out", "shipment.in"]), T0)
        .await
        .unwrap();
    store
        .create_subscriber(
            NewSubscriber {
                tenant_id: Some("acme".into()),
                ..sub("acme-s", &[])
            },
            T0,
        )
        .await
        .unwrap();
    // Accepted at T0 + 10 * i: before, inside and after the range [T0 + 10, T0 + 60).
    let published = [
        ("e0", "shipment.out", None),
        ("e1", "shipment.out", None),
        ("e2", "invoice.paid", None),
        ("e3", "shipment.in", None),
        ("e4", "shipment.out", Some("acme")),
        ("e5", "shipment.out", None),
        ("e6", "shipment.out", None),
    ];
    for ((id, ty, tenant), i) in published.into_iter().zip(0i64..) {
        let e = NewEvent {
            tenant_id: tenant.map(str::to_owned),
            ..event(id, ty)
        };
        store.publish(e, T0 + 10 * i).await.unwrap();
    }
    let preview = |r: ResendRequest| {
        let store = store.clone();
        async move { store.preview_resend(r).await.unwrap() }
    };
    let (since, until) = (T0 + 10, T0 + 60);
    assert_eq!(
        preview(resend("s", since, until, 10)).await,
        ids(&["e1", "e3", "e5"]),
        "its tenant's events of its types, in the range, oldest first"
    );
    assert_eq!(
        preview(resend("s", since, until, 2)).await,
        ids(&["e1", "e3"])
    );
    assert_eq!(
        preview(resend("acme-s", T0, T0 + 100, 10)).await,
        ids(&["e4"]),
        "a tenant's subscriber gets its tenant's events only"
    );
    let only_in = ResendRequest {
        event_types: ids(&["shipment.in", "invoice.paid"]),
        ..resend("s", since, until, 10)
    };
    assert_eq!(
        preview(only_in).await,
        ids(&["e3"]),
        "the request's types narrow the subscriber's, never widen them"
    );
    // Its types now, not when the events were published.
    store
        .update_subscriber(
            "s",
            SubscriberPatch {
                event_types: Some(ids(&["invoice.paid"])),
                ..Default::default()
            },
            T0 + 100,
        )
        .await
        .unwrap();
    assert_eq!(preview(resend("s", since, until, 10)).await, ids(&["e2"]));
    store
        .update_subscriber(
            "s",
            SubscriberPatch {
                event_types: Some(Vec::new()),
                ..Default::default()
            },
            T0 + 100,
        )
        .await
        .unwrap();
    assert_eq!(
        preview(resend("s", since, until, 10)).await,
        ids(&["e1", "e2", "e3", "e5"])
    );

    // Pinned below an event's every version: that event is not selected; pinned between its
    // versions: the highest at or below the pin is sent, as a fan-out chooses.
    let versioned = NewEvent {
        payload_version: 3,
        earlier_payloads: vec![(2, r#"{"v":2}"#.into())],
        ..event("v", "t")
    };
    store.publish(versioned, T0 + 200).await.unwrap();
    store.publish(event("v1", "t"), T0 + 201).await.unwrap();
    let mut pinned = sub("pinned", &[]);
    pinned.payload_version = Some(2);
    store.create_subscriber(pinned, T0 + 300).await.unwrap();
    let mut low = sub("low", &[]);
    low.payload_version = Some(0);
    store.create_subscriber(low, T0 + 300).await.unwrap();
    assert_eq!(
        preview(resend("pinned", T0 + 200, T0 + 300, 10)).await,
        ids(&["v", "v1"])
    );
    assert!(preview(resend("low", T0 + 200, T0 + 300, 10))
        .await
        .is_empty());
    let made = store
        .resend(resend("pinned", T0 + 200, T0 + 300, 10), T0 + 400)
        .await
        .unwrap();
    let version = store
        .get_delivery(&made.delivery_ids[0])
        .await
        .unwrap()
        .payload_version;
    assert_eq!(version, Some(2));

    // Bad requests change nothing and name what is wrong.
    for (r, says) in [
        (resend("s", until, since, 10), "until"),
        (resend("s", since, until, 0), "limit"),
        (resend("s", since, until, MAX_REPLAY + 1), "limit"),
        (
            ResendRequest {
                per_second: Some(0.0),
                ..resend("s", since, until, 10)
            },
            "per_second",
        ),
        (
            ResendRequest {
                expected: Some(Vec::new()),
                ..resend("s", since, until, 10)
            },
            "expected_event_ids",
        ),
    ] {
        match store.resend(r, T0 + 500).await {
            Err(StoreError::Invalid(m)) => assert!(m.contains(says), "{m}"),
            other => panic!("{says}: {other:?}"),
        }
    }
    assert!(matches!(
        store
            .resend(resend("nobody", since, until, 10), T0 + 500)
            .await,
        Err(StoreError::NotFound(_))
    ));
    let page = store
        .list_resends(ResendFilter::default(), ListOrder::NewestFirst, 10, None)
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1, "only the resend that was made");
}

/// Each resent event is a new delivery named `<event>:<subscriber>:resend-<n>`, n counting the
/// resends of that event to that subscriber; it starts a fresh budget and window, is paced, is
/// claimed and sent under its own id, and a confirm held to a preview resends exactly it or
/// nothing.
pub(crate) async fn resends_are_new_deliveries_with_fresh_ids(h: &impl Harness) {
    let store = h.open().await;
    store.create_subscriber(sub("s", &[]), T0).await.unwrap();
    store
        .create_subscriber(sub("other", &[]), T0)
        .await
        .unwrap();
    for (id, i) in ["e1", "e2"].into_iter().zip(0i64..) {
        store.publish(event(id, "t"), T0 + i).await.unwrap();
    }
    assert_eq!(deliver_all(&*store, T0 + 5).await.len(), 4);

    let now = T0 + 1_000;
    let first = store
        .resend(
            ResendRequest {
                per_second: Some(2.0),
                ..resend("s", T0, T0 + 10, 10)
            },
            now,
        )
        .await
        .unwrap();
    assert_eq!(first.delivery_ids, ids(&["e1:s:resend-1", "e2:s:resend-1"]));
    assert_eq!(first.selected, 2);
    assert_eq!(
        (first.subscriber_id.as_str(), first.since, first.until),
        ("s", T0, T0 + 10)
    );
    assert_eq!(first.requested_by.as_deref(), Some("ops"));
    let d = store.get_delivery("e2:s:resend-1").await.unwrap();
    assert_eq!(
        (d.event_id.as_str(), d.subscriber_id.as_str(), d.state),
        ("e2", "s", DeliveryState::Scheduled)
    );
    assert_eq!((d.attempts, d.first_seen), (0, now));
    assert_eq!(
        (d.window_start, d.next_attempt_at),
        (now + 500, Some(now + 500)),
        "paced: the second is released half a second later"
    );
    assert_eq!(
        store.get_delivery("e2:s").await.unwrap().state,
        DeliveryState::Delivered,
        "the original stays as it was"
    );

    // A second resend of the same events numbers them on; another subscriber's count apart.
    let preview = store
        .preview_resend(resend("s", T0, T0 + 10, 10))
        .await
        .unwrap();
    assert_eq!(preview, ids(&["e1", "e2"]));
    let second = store
        .resend(
            ResendRequest {
                expected: Some(preview),
                ..resend("s", T0, T0 + 10, 10)
            },
            now + 1,
        )
        .await
        .unwrap();
    assert_eq!(
        second.delivery_ids,
        ids(&["e1:s:resend-2", "e2:s:resend-2"])
    );
    let other = store
        .resend(resend("other", T0, T0 + 1, 10), now + 1)
        .await
        .unwrap();
    assert_eq!(other.delivery_ids, ids(&["e1:other:resend-1"]));

    // Claimed and sent under their own ids, with the event's body.
    let claimed = store
        .claim_due(claim(now + 10_000, 100, 100))
        .await
        .unwrap();
    let mut sent: Vec<(String, String)> = claimed
        .iter()
        .map(|c| (c.id.clone(), c.event.id.clone()))
        .collect();
    sent.sort();
    assert_eq!(
        sent,
        [
            ("e1:other:resend-1", "e1"),
            ("e1:s:resend-1", "e1"),
            ("e1:s:resend-2", "e1"),
            ("e2:s:resend-1", "e2"),
            ("e2:s:resend-2", "e2"),
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
    assert!(claimed.iter().all(|c| c.attempt == 1));
    let done = claimed
        .iter()
        .map(|c| {
            let t = if c.id == "e2:s:resend-1" {
                Transition::Dead(DeadReason::PermanentFailure)
            } else {
                Transition::Delivered
            };
            completion(c, t, now + 10_000)
        })
        .collect();
    store.complete(done, now + 10_000).await.unwrap();
    let audited = store.get_resend(&first.id).await.unwrap();
    assert_eq!((audited.delivered, audited.dead), (1, 1));

    // A confirm whose preview no longer holds makes nothing.
    let stale = ResendRequest {
        expected: Some(ids(&["e2"])),
        ..resend("s", T0, T0 + 10, 10)
    };
    assert!(matches!(
        store.resend(stale, now + 20_000).await,
        Err(StoreError::Conflict(_))
    ));
    let of_s = store
        .list_resends(
            ResendFilter {
                subscriber_id: Some("s".into()),
                ..Default::default()
            },
            ListOrder::NewestFirst,
            10,
            None,
        )
        .await
        .unwrap();
    assert_eq!(of_s.items.len(), 2, "the refused confirm left no audit");
    assert!(store.get_delivery("e1:s:resend-3").await.is_err());

    // Prune keeps what an audit names, so no n is ever used twice.
    assert_eq!(
        store.prune_delivered(i64::MAX, 100).await.unwrap(),
        4,
        "the four originals"
    );
    assert_eq!(
        store.get_delivery("e1:s:resend-1").await.unwrap().state,
        DeliveryState::Delivered
    );
    let third = store
        .resend(resend("s", T0, T0 + 1, 10), now + 30_000)
        .await
        .unwrap();
    assert_eq!(third.delivery_ids, ids(&["e1:s:resend-3"]));
}

/// A paused subscriber's resent deliveries are held like its others and released by its
/// resume; a revoked subscriber is refused, and nothing is made or audited.
pub(crate) async fn resends_to_paused_are_held_and_to_revoked_refused(h: &impl Harness) {
    let store = h.open().await;
    for id in ["paused", "gone"] {
        store.create_subscriber(sub(id, &[]), T0).await.unwrap();
    }
    store.publish(event("e1", "t"), T0).await.unwrap();
    deliver_all(&*store, T0 + 1).await;
    let status = |status| SubscriberPatch {
        status: Some(status),
        ..Default::default()
    };
    store
        .update_subscriber("paused", status(SubscriberStatus::Paused), T0 + 2)
        .await
        .unwrap();
    let made = store
        .resend(resend("paused", T0, T0 + 1, 10), T0 + 3)
        .await
        .unwrap();
    assert_eq!(made.delivery_ids, ids(&["e1:paused:resend-1"]));
    assert!(store
        .claim_due(claim(T0 + 10, 100, 100))
        .await
        .unwrap()
        .is_empty());
    let stats = store.queue_stats(T0 + 10, caps(100), &[]).await.unwrap();
    assert_eq!(stats.counts.scheduled, 1);
    store
        .update_subscriber("paused", status(SubscriberStatus::Active), T0 + 11)
        .await
        .unwrap();
    let claimed = store.claim_due(claim(T0 + 12, 100, 100)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, "e1:paused:resend-1");
    let done = claimed
        .iter()
        .map(|c| completion(c, Transition::Delivered, T0 + 13))
        .collect();
    store.complete(done, T0 + 13).await.unwrap();

    store.revoke_subscriber("gone", T0 + 20).await.unwrap();
    assert!(matches!(
        store.resend(resend("gone", T0, T0 + 1, 10), T0 + 21).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.preview_resend(resend("gone", T0, T0 + 1, 10)).await,
        Err(StoreError::Conflict(_))
    ));
    let all = store
        .list_resends(ResendFilter::default(), ListOrder::OldestFirst, 10, None)
        .await
        .unwrap();
    assert_eq!(all.items.len(), 1);
}

/// The audit lists resends newest first (or oldest), paged, a tenant's and a subscriber's
/// alone when asked; each is fetched by its id.
pub(crate) async fn resends_are_audited_and_paged(h: &impl Harness) {
    let store = h.open().await;
    store
        .create_tenant(
            NewTenant {
                id: "acme".into(),
                name: None,
                max_subscribers: None,
                max_events_per_second: None,
            },
            T0,
        )
        .await
        .unwrap();
    store.create_subscriber(sub("s", &[]), T0).await.unwrap();
    store
        .create_subscriber(
            NewSubscriber {
                tenant_id: Some("acme".into()),
                ..sub("acme-s", &[])
            },
            T0,
        )
        .await
        .unwrap();
    store.publish(event("e1", "t"), T0).await.unwrap();
    let mut made = Vec::new();
    for i in 0..3 {
        let r = store
            .resend(resend("s", T0, T0 + 1, 1), T0 + 10 + i)
            .await
            .unwrap();
        made.push(r.id);
    }
    let acme = store
        .resend(resend("acme-s", T0, T0 + 1, 1), T0 + 20)
        .await
        .unwrap();
    assert_eq!(acme.tenant_id.as_deref(), Some("acme"));
    assert_eq!(acme.selected, 0, "an empty resend is audited too");

    let listed = |filter: ResendFilter, order, limit, cursor| {
        let store = store.clone();
        async move {
            store
                .list_resends(filter, order, limit, cursor)
                .await
                .unwrap()
        }
    };
    let first = listed(ResendFilter::default(), ListOrder::NewestFirst, 2, None).await;
    let ids_of =
        |p: &Page<Resend>| -> Vec<String> { p.items.iter().map(|r| r.id.clone()).collect() };
    assert_eq!(ids_of(&first), vec![acme.id.clone(), made[2].clone()]);
    let rest = listed(
        ResendFilter::default(),
        ListOrder::NewestFirst,
        2,
        first.next_cursor.clone(),
    )
    .await;
    assert_eq!(ids_of(&rest), vec![made[1].clone(), made[0].clone()]);
    assert_eq!(rest.next_cursor, None);
    let oldest = listed(ResendFilter::default(), ListOrder::OldestFirst, 1, None).await;
    assert_eq!(ids_of(&oldest), vec![made[0].clone()]);
    let of_acme = listed(
        ResendFilter {
            tenant_id: Some("acme".into()),
            ..Default::default()
        },
        ListOrder::NewestFirst,
        10,
        None,
    )
    .await;
    assert_eq!(ids_of(&of_acme), vec![acme.id.clone()]);
    let of_s = listed(
        ResendFilter {
            subscriber_id: Some("s".into()),
            ..Default::default()
        },
        ListOrder::NewestFirst,
        10,
        None,
    )
    .await;
    assert_eq!(of_s.items.len(), 3);
    let got = store.get_resend(&made[2]).await.unwrap();
    assert_eq!(got.delivery_ids, ids(&["e1:s:resend-3"]));
    assert_eq!(
        (got.limit, got.per_second, got.event_types.len()),
        (1, None, 0)
    );
    assert_eq!(got.created_at, T0 + 12);
    assert!(matches!(
        store.get_resend("rsd_nope").await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store
            .list_resends(
                ResendFilter::default(),
                ListOrder::NewestFirst,
                10,
                Some("x".into())
            )
            .await,
        Err(StoreError::Invalid(_))
    ));
    // A restart keeps them.
    drop(store);
    let store = h.open().await;
    assert_eq!(store.get_resend(&made[0]).await.unwrap().selected, 1);
}
