//! Events as an operator finds them: newest first, by type, type prefix, tenant and time.

use super::*;

pub(crate) async fn events_are_searched_newest_first_and_paged(h: &impl Harness) {
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
    // Two at the same time: the greater id is the newer.
    for (id, ty, at, tenant) in [
        ("e1", "shipment.delivered", T0, None),
        ("e2", "shipment.eta.changed", T0 + 10, None),
        ("e3", "invoice.paid", T0 + 20, None),
        ("e4", "shipment.delivered", T0 + 30, Some("acme")),
        ("e5", "shipments.x", T0 + 30, None),
    ] {
        let e = NewEvent {
            tenant_id: tenant.map(str::to_owned),
            ..event(id, ty)
        };
        store.publish(e, at).await.unwrap();
    }
    let ids =
        |page: &Page<EventSummary>| page.items.iter().map(|e| e.id.clone()).collect::<Vec<_>>();
    let search = |filter: EventFilter, limit: u32, cursor: Option<String>| {
        let store = store.clone();
        async move { store.list_events(filter, limit, cursor).await.unwrap() }
    };
    let all = search(EventFilter::default(), 100, None).await;
    assert_eq!(ids(&all), ["e5", "e4", "e3", "e2", "e1"]);
    assert_eq!(all.items[4].counts.scheduled, 1, "each with its counts");
    // Paged two at a time, through the tie.
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = search(EventFilter::default(), 2, cursor).await;
        seen.extend(ids(&page));
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(seen, ["e5", "e4", "e3", "e2", "e1"]);
    let of_type = EventFilter {
        event_type: Some("shipment.delivered".into()),
        ..Default::default()
    };
    assert_eq!(ids(&search(of_type, 100, None).await), ["e4", "e1"]);
    let prefixed = EventFilter {
        type_prefix: Some("shipment.".into()),
        ..Default::default()
    };
    assert_eq!(ids(&search(prefixed, 100, None).await), ["e4", "e2", "e1"]);
    let upper = EventFilter {
        type_prefix: Some("SHIPMENT.".into()),
        ..Default::default()
    };
    assert!(
        search(upper, 100, None).await.items.is_empty(),
        "case-sensitive"
    );
    let acme = EventFilter {
        tenant_id: Some("acme".into()),
        ..Default::default()
    };
    assert_eq!(ids(&search(acme, 100, None).await), ["e4"]);
    let window = EventFilter {
        since: Some(T0 + 10),
        until: Some(T0 + 30),
        ..Default::default()
    };
    assert_eq!(ids(&search(window, 100, None).await), ["e3", "e2"]);
    for bad in ["garbage", "12", "x:e1", "5:"] {
        assert!(
            matches!(
                store
                    .list_events(EventFilter::default(), 10, Some(bad.into()))
                    .await,
                Err(StoreError::Invalid(_))
            ),
            "{bad}"
        );
    }
}

/// A subscriber's `shipment.*` receives every type under `shipment.` and nothing else; `*`
/// and an empty list receive everything; a paused wildcard subscriber's delivery is held.
pub(crate) async fn wildcard_subscriptions_fan_out_below_their_prefix(h: &impl Harness) {
    let store = h.open().await;
    for s in [
        sub("prefix", &["shipment.*"]),
        sub("nested", &["shipment.eta.*", "invoice.paid"]),
        sub("any", &["*"]),
        sub("all", &[]),
        sub("exact", &["shipment"]),
    ] {
        store.create_subscriber(s, T0).await.unwrap();
    }
    store
        .create_subscriber(sub("paused", &["shipment.*"]), T0)
        .await
        .unwrap();
    let status = |status| SubscriberPatch {
        status: Some(status),
        ..Default::default()
    };
    store
        .update_subscriber("paused", status(SubscriberStatus::Paused), T0)
        .await
        .unwrap();
    let reached = |event_id: &'static str| {
        let store = store.clone();
        async move {
            let filter = DeliveryFilter {
                event_id: Some(event_id.into()),
                ..DeliveryFilter::default()
            };
            let page = store.list_deliveries(filter, 100, None).await.unwrap();
            let mut ids: Vec<String> = page.items.iter().map(|d| d.subscriber_id.clone()).collect();
            ids.sort();
            ids
        }
    };
    for (id, ty, expected) in [
        (
            "e1",
            "shipment.delivered",
            &["all", "any", "paused", "prefix"][..],
        ),
        (
            "e2",
            "shipment.eta.changed",
            &["all", "any", "nested", "paused", "prefix"][..],
        ),
        ("e3", "shipment", &["all", "any", "exact"][..]),
        ("e4", "shipments.x", &["all", "any"][..]),
        ("e5", "invoice.paid", &["all", "any", "nested"][..]),
    ] {
        let PublishOutcome::Accepted(receipt) = store.publish(event(id, ty), T0).await.unwrap()
        else {
            panic!("{id} not accepted");
        };
        assert_eq!(receipt.deliveries, expected.len() as u64, "{id} {ty}");
        assert_eq!(reached(id).await, expected, "{id} {ty}");
    }
    // The paused subscriber's delivery waits; resumed, it is claimed with the others.
    let claimed = store.claim_due(claim(T0, 100, 100)).await.unwrap();
    assert!(claimed
        .iter()
        .all(|c| c.destination.subscriber_id != "paused"));
    store
        .update_subscriber("paused", status(SubscriberStatus::Active), T0)
        .await
        .unwrap();
    let claimed = store.claim_due(claim(T0, 100, 100)).await.unwrap();
    assert_eq!(
        claimed
            .iter()
            .filter(|c| c.destination.subscriber_id == "paused")
            .count(),
        2
    );
}
