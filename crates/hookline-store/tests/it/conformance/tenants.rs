//! Tenants: their records and quotas, and how a tenant scopes fan-out, lists and replays.

use super::*;

fn tenant(id: &str) -> NewTenant {
    NewTenant {
        id: id.into(),
        name: Some(format!("{id} Ltd")),
        max_subscribers: None,
        max_events_per_second: None,
    }
}

fn sub_of(tenant: &str, id: &str, types: &[&str]) -> NewSubscriber {
    NewSubscriber {
        tenant_id: Some(tenant.into()),
        ..sub(id, types)
    }
}

fn event_of(tenant: Option<&str>, id: &str, ty: &str) -> NewEvent {
    NewEvent {
        tenant_id: tenant.map(str::to_owned),
        ..event(id, ty)
    }
}

pub(crate) async fn tenants_are_created_listed_changed_and_deleted(h: &impl Harness) {
    let store = h.open().await;
    let a = store.create_tenant(tenant("acme"), T0).await.unwrap();
    assert_eq!(a.name.as_deref(), Some("acme Ltd"));
    assert_eq!((a.created_at, a.updated_at), (T0, T0));
    assert!(matches!(
        store.create_tenant(tenant("acme"), T0).await,
        Err(StoreError::Conflict(_))
    ));
    for id in ["globex", "initech"] {
        store.create_tenant(tenant(id), T0).await.unwrap();
    }
    let first = store.list_tenants(2, None).await.unwrap();
    assert_eq!(
        first
            .items
            .iter()
            .map(|t| t.id.as_str())
            .collect::<Vec<_>>(),
        ["acme", "globex"]
    );
    let rest = store.list_tenants(2, first.next_cursor).await.unwrap();
    assert_eq!(rest.items.len(), 1);
    assert_eq!(rest.next_cursor, None);

    let changed = store
        .update_tenant(
            "acme",
            TenantPatch {
                name: Some(None),
                max_subscribers: Some(Some(3)),
                max_events_per_second: Some(Some(50.0)),
            },
            T0 + 1,
        )
        .await
        .unwrap();
    assert_eq!(changed.name, None);
    assert_eq!(changed.max_subscribers, Some(3));
    assert_eq!(changed.max_events_per_second, Some(50.0));
    assert_eq!(changed.updated_at, T0 + 1);
    assert_eq!(store.get_tenant("acme").await.unwrap(), changed);
    // A rate the limiter cannot keep changes nothing.
    let bad = TenantPatch {
        max_events_per_second: Some(Some(0.0)),
        ..Default::default()
    };
    assert!(matches!(
        store.update_tenant("acme", bad, T0 + 2).await,
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(store.get_tenant("acme").await.unwrap(), changed);
    assert!(matches!(
        store
            .update_tenant("nobody", TenantPatch::default(), T0)
            .await,
        Err(StoreError::NotFound(_))
    ));

    // Deleting revokes its subscribers (their waiting deliveries die) and nobody else's; the
    // tenant is gone, and its id is not used again.
    store
        .create_subscriber(sub_of("acme", "acme-1", &[]), T0)
        .await
        .unwrap();
    store
        .create_subscriber(sub("plain", &[]), T0)
        .await
        .unwrap();
    accepted(&*store, event_of(Some("acme"), "e1", "t"), T0 + 3).await;
    let gone = store.delete_tenant("acme", T0 + 4).await.unwrap();
    assert_eq!(gone.id, "acme");
    let d = store.get_delivery("e1:acme-1").await.unwrap();
    assert_eq!(d.dead_reason, Some(DeadReason::SubscriptionRevoked));
    assert_eq!(
        store.get_subscriber("acme-1").await.unwrap().status,
        SubscriberStatus::Revoked
    );
    assert_eq!(
        store.get_subscriber("plain").await.unwrap().status,
        SubscriberStatus::Active
    );
    for missing in [
        store.get_tenant("acme").await.map(|_| ()),
        store.delete_tenant("acme", T0 + 5).await.map(|_| ()),
    ] {
        assert!(
            matches!(missing, Err(StoreError::NotFound(_))),
            "{missing:?}"
        );
    }
    assert!(matches!(
        store.create_tenant(tenant("acme"), T0 + 6).await,
        Err(StoreError::Conflict(_))
    ));
    let listed = store.list_tenants(10, None).await.unwrap();
    assert!(listed.items.iter().all(|t| t.id != "acme"));
    // Events for a deleted tenant are refused like those for one that never was.
    for tenant in ["acme", "nobody"] {
        assert!(matches!(
            store
                .publish(event_of(Some(tenant), "e9", "t"), T0 + 7)
                .await,
            Err(StoreError::Invalid(_))
        ));
        assert!(matches!(
            store
                .create_subscriber(sub_of(tenant, "late", &[]), T0 + 7)
                .await,
            Err(StoreError::Invalid(_))
        ));
    }
    assert!(matches!(
        store.get_event("e9").await,
        Err(StoreError::NotFound(_))
    ));
}

pub(crate) async fn a_tenant_s_events_reach_its_subscribers_only(h: &impl Harness) {
    let store = h.open().await;
    for t in ["acme", "globex"] {
        store.create_tenant(tenant(t), T0).await.unwrap();
    }
    store
        .create_subscriber(sub_of("acme", "a1", &["shipment.delivered"]), T0)
        .await
        .unwrap();
    store
        .create_subscriber(sub_of("acme", "a2", &[]), T0)
        .await
        .unwrap();
    store
        .create_subscriber(sub_of("globex", "g1", &[]), T0)
        .await
        .unwrap();
    store
        .create_subscriber(sub("plain", &[]), T0)
        .await
        .unwrap();
    let receipt = match store
        .publish(event_of(Some("acme"), "e1", "shipment.delivered"), T0)
        .await
        .unwrap()
    {
        PublishOutcome::Accepted(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(receipt.tenant_id.as_deref(), Some("acme"));
    assert_eq!(receipt.deliveries, 2);
    // Without a tenant: subscribers without one, as before tenants.
    assert_eq!(
        accepted(&*store, event_of(None, "e2", "shipment.delivered"), T0).await,
        1
    );
    assert_eq!(
        accepted(&*store, event_of(Some("globex"), "e3", "x"), T0).await,
        1
    );
    let ids = |page: Page<Delivery>| {
        let mut ids: Vec<String> = page.items.into_iter().map(|d| d.id).collect();
        ids.sort();
        ids
    };
    let counts = store.tenant_counts("acme").await.unwrap();
    assert_eq!((counts.scheduled, counts.dead), (2, 0));
    assert_eq!(store.tenant_counts("nobody").await.unwrap().scheduled, 0);
    let everything = store
        .list_deliveries(DeliveryFilter::default(), 100, None)
        .await
        .unwrap();
    assert_eq!(ids(everything), ["e1:a1", "e1:a2", "e2:plain", "e3:g1"]);
    let of = |t: &str| DeliveryFilter {
        tenant_id: Some(t.into()),
        ..Default::default()
    };
    let acme = store.list_deliveries(of("acme"), 100, None).await.unwrap();
    assert!(acme
        .items
        .iter()
        .all(|d| d.tenant_id.as_deref() == Some("acme")));
    assert_eq!(ids(acme), ["e1:a1", "e1:a2"]);
    // Every list filters alike: by event and by subscriber too.
    let by_event = DeliveryFilter {
        event_id: Some("e1".into()),
        ..of("globex")
    };
    assert!(store
        .list_deliveries(by_event, 100, None)
        .await
        .unwrap()
        .items
        .is_empty());
    let by_subscriber = DeliveryFilter {
        subscriber_id: Some("g1".into()),
        order: ListOrder::NewestFirst,
        ..of("globex")
    };
    assert_eq!(
        ids(store
            .list_deliveries(by_subscriber, 100, None)
            .await
            .unwrap()),
        ["e3:g1"]
    );
    assert_eq!(
        store
            .get_delivery("e3:g1")
            .await
            .unwrap()
            .tenant_id
            .as_deref(),
        Some("globex")
    );
    assert_eq!(
        store.get_delivery("e2:plain").await.unwrap().tenant_id,
        None
    );
    assert_eq!(
        store.get_event("e1").await.unwrap().tenant_id.as_deref(),
        Some("acme")
    );
    let subscribers = SubscriberFilter {
        tenant_id: Some("acme".into()),
        ..Default::default()
    };
    let listed = store
        .list_subscribers(subscribers, 100, None)
        .await
        .unwrap();
    assert_eq!(
        listed
            .items
            .iter()
            .map(|s| s.id.as_str())
            .collect::<Vec<_>>(),
        ["a1", "a2"]
    );
    assert_eq!(
        store
            .get_subscriber("a1")
            .await
            .unwrap()
            .tenant_id
            .as_deref(),
        Some("acme")
    );

    // The same id again from another tenant is another event: a conflict, never its receipt.
    assert_eq!(
        store
            .publish(event_of(Some("globex"), "e1", "shipment.delivered"), T0)
            .await
            .unwrap(),
        PublishOutcome::Conflict
    );
    assert!(matches!(
        store
            .publish(event_of(Some("acme"), "e1", "shipment.delivered"), T0)
            .await
            .unwrap(),
        PublishOutcome::AlreadyAccepted(_)
    ));
}

/// A test event (`only_subscriber`) reaches that one subscriber whatever its event types, held
/// while it is paused; one that would reach nobody (revoked, another tenant's, unknown) stores
/// nothing.
pub(crate) async fn a_test_event_reaches_its_one_subscriber_only(h: &impl Harness) {
    let store = h.open().await;
    for t in ["acme", "globex"] {
        store.create_tenant(tenant(t), T0).await.unwrap();
    }
    for (t, id, types) in [
        ("acme", "a-invoices", &["invoice.paid"][..]),
        ("acme", "a-all", &[][..]),
        ("acme", "a-paused", &["invoice.paid"][..]),
        ("acme", "a-gone", &[][..]),
        ("globex", "g-all", &[][..]),
    ] {
        store
            .create_subscriber(sub_of(t, id, types), T0)
            .await
            .unwrap();
    }
    let pause = SubscriberPatch {
        status: Some(SubscriberStatus::Paused),
        ..Default::default()
    };
    store
        .update_subscriber("a-paused", pause, T0)
        .await
        .unwrap();
    store.revoke_subscriber("a-gone", T0).await.unwrap();
    let test_event = |id: &str, to: &str| NewEvent {
        only_subscriber: Some(to.into()),
        ..event_of(Some("acme"), id, "hookline.test")
    };

    // Not among its event types, and another subscriber takes every type: it alone.
    assert_eq!(
        accepted(&*store, test_event("test-1", "a-invoices"), T0).await,
        1
    );
    assert_eq!(
        accepted(&*store, test_event("test-2", "a-paused"), T0).await,
        1
    );
    let of_event = |id: &str| DeliveryFilter {
        event_id: Some(id.into()),
        ..Default::default()
    };
    let listed = store
        .list_deliveries(of_event("test-1"), 100, None)
        .await
        .unwrap();
    assert_eq!(
        listed
            .items
            .iter()
            .map(|d| d.id.as_str())
            .collect::<Vec<_>>(),
        ["test-1:a-invoices"]
    );
    assert_eq!(listed.items[0].tenant_id.as_deref(), Some("acme"));
    let event = store.get_event("test-1").await.unwrap();
    assert_eq!(
        (
            event.deliveries,
            event.tenant_id.as_deref(),
            event.event_type.as_str()
        ),
        (1, Some("acme"), "hookline.test")
    );
    // The paused subscriber's is held: only the active one's is claimed.
    let claimed = store.claim_due(claim(T0, 10, 10)).await.unwrap();
    assert_eq!(
        claimed.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["test-1:a-invoices"]
    );
    assert_eq!(
        store.get_delivery("test-2:a-paused").await.unwrap().state,
        DeliveryState::Scheduled
    );

    // Reaching nobody, it is refused and nothing is stored.
    for (id, to) in [
        ("test-3", "a-gone"),
        ("test-4", "g-all"),
        ("test-5", "nobody"),
    ] {
        let refused = store.publish(test_event(id, to), T0).await;
        assert!(
            matches!(&refused, Err(StoreError::Conflict(m)) if m.contains(to)),
            "{to}: {refused:?}"
        );
        assert!(matches!(
            store.get_event(id).await,
            Err(StoreError::NotFound(_))
        ));
    }
    // A plain event still fans out by type.
    assert_eq!(
        accepted(&*store, event_of(Some("acme"), "e1", "invoice.paid"), T0).await,
        3
    );
}

pub(crate) async fn a_tenant_s_dead_letters_and_replays_are_its_own(h: &impl Harness) {
    let store = h.open().await;
    for t in ["acme", "globex"] {
        store.create_tenant(tenant(t), T0).await.unwrap();
        store
            .create_subscriber(sub_of(t, &format!("{t}-1"), &[]), T0)
            .await
            .unwrap();
        accepted(&*store, event_of(Some(t), &format!("{t}-e"), "t"), T0).await;
    }
    assert_eq!(kill_all(&*store, T0, DeadReason::PermanentFailure).await, 2);
    let of = |t: &str| DeadLetterFilter {
        tenant_id: Some(t.into()),
        ..Default::default()
    };
    let acme = store
        .list_dead_letters(of("acme"), 100, None)
        .await
        .unwrap();
    assert_eq!(acme.items.len(), 1);
    assert_eq!(acme.items[0].delivery_id, "acme-e:acme-1");
    assert_eq!(acme.items[0].tenant_id.as_deref(), Some("acme"));
    let by_reason = DeadLetterFilter {
        reason: Some(DeadReason::PermanentFailure),
        ..of("globex")
    };
    let globex = store.list_dead_letters(by_reason, 100, None).await.unwrap();
    assert_eq!(globex.items.len(), 1);
    assert_eq!(globex.items[0].delivery_id, "globex-e:globex-1");
    let groups = store
        .dead_letter_groups(T0, Some("acme".into()), 10)
        .await
        .unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].subscriber_id, "acme-1");
    assert_eq!(
        store.dead_letter_groups(T0, None, 10).await.unwrap().len(),
        2
    );
    let inflow = store
        .dead_letters_by_reason(T0, Some("globex".into()))
        .await
        .unwrap();
    assert_eq!(inflow, [(DeadReason::PermanentFailure, 1)]);

    // A tenant's replay selects its dead letters only, and its audit is listed as its own.
    let request = ReplayRequest {
        tenant_id: Some("acme".into()),
        reason: DeadReason::PermanentFailure,
        subscriber_id: None,
        limit: 100,
        per_second: None,
        requested_by: None,
        expected: None,
    };
    assert_eq!(
        store.preview_replay(request.clone()).await.unwrap(),
        ["acme-e:acme-1"]
    );
    let replay = store.replay(request, T0 + 1).await.unwrap();
    assert_eq!(replay.tenant_id.as_deref(), Some("acme"));
    assert_eq!(replay.delivery_ids, ["acme-e:acme-1"]);
    assert_eq!(
        store.get_delivery("globex-e:globex-1").await.unwrap().state,
        DeliveryState::Dead
    );
    let listed = |t: Option<&str>| {
        let store = store.clone();
        let t = t.map(str::to_owned);
        async move {
            store
                .list_replays(t, ListOrder::NewestFirst, 10, None)
                .await
                .unwrap()
                .items
                .len()
        }
    };
    assert_eq!(listed(Some("acme")).await, 1);
    assert_eq!(listed(Some("globex")).await, 0);
    assert_eq!(listed(None).await, 1);
}

pub(crate) async fn tenant_quotas_refuse_and_store_nothing(h: &impl Harness) {
    let store = h.open().await;
    let limited = NewTenant {
        max_subscribers: Some(2),
        max_events_per_second: Some(2.0),
        ..tenant("acme")
    };
    store.create_tenant(limited, T0).await.unwrap();
    store.create_tenant(tenant("globex"), T0).await.unwrap();
    for id in ["a1", "a2"] {
        store
            .create_subscriber(sub_of("acme", id, &[]), T0)
            .await
            .unwrap();
    }
    let over = store.create_subscriber(sub_of("acme", "a3", &[]), T0).await;
    assert!(
        matches!(&over, Err(StoreError::OverQuota(m)) if m.contains("max_subscribers")),
        "{over:?}"
    );
    assert!(matches!(
        store.get_subscriber("a3").await,
        Err(StoreError::NotFound(_))
    ));
    // Revoked subscribers do not count.
    store.revoke_subscriber("a1", T0).await.unwrap();
    store
        .create_subscriber(sub_of("acme", "a3", &[]), T0)
        .await
        .unwrap();

    // A publish admission refuses stores nothing and takes nothing from the rate.
    let refused = NewEvent {
        admit_at_most: Some(0),
        ..event_of(Some("acme"), "too-big", "t")
    };
    assert!(matches!(
        store.publish(refused, T0).await,
        Err(StoreError::OverCapacity { .. })
    ));
    // Two a second: a second's worth at once, then the third waits; another tenant does not.
    for i in 0..2 {
        accepted(&*store, event_of(Some("acme"), &format!("e{i}"), "t"), T0).await;
    }
    let refused = store.publish(event_of(Some("acme"), "e2", "t"), T0).await;
    match refused {
        Err(StoreError::RateLimited { retry_after_ms, .. }) => {
            assert!((1..=1000).contains(&retry_after_ms), "{retry_after_ms}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        store.get_event("e2").await,
        Err(StoreError::NotFound(_))
    ));
    for i in 0..5 {
        accepted(&*store, event_of(Some("globex"), &format!("g{i}"), "t"), T0).await;
    }
    // A publish of an accepted event is answered even while the rate refuses new ones.
    assert!(matches!(
        store.publish(event_of(Some("acme"), "e0", "t"), T0).await,
        Ok(PublishOutcome::AlreadyAccepted(_))
    ));
    // Half a second later one more fits.
    accepted(&*store, event_of(Some("acme"), "e2", "t"), T0 + 500).await;
}

pub(crate) async fn portal_sessions_expire_are_revoked_and_end_with_their_tenant(h: &impl Harness) {
    let store = h.open().await;
    for t in ["acme", "globex"] {
        store.create_tenant(tenant(t), T0).await.unwrap();
    }
    let session = |id: &str, tenant: &str, hash: &str| NewPortalSession {
        id: id.into(),
        tenant_id: tenant.into(),
        token_sha256: hash.into(),
        scope: "admin".into(),
        expires_at: T0 + 3_600_000,
        created_by: Some("ops".into()),
    };
    let made = store
        .create_portal_session(session("ps1", "acme", "aa11"), T0)
        .await
        .unwrap();
    assert_eq!((made.tenant_id.as_str(), made.created_at), ("acme", T0));
    assert!(matches!(
        store
            .create_portal_session(session("ps2", "nobody", "bb22"), T0)
            .await,
        Err(StoreError::NotFound(_))
    ));
    let active = |hash: &'static str, at: i64| {
        let store = store.clone();
        async move { store.active_portal_session(hash, at).await.unwrap() }
    };
    assert_eq!(
        active("aa11", T0 + 1).await.map(|s| s.id),
        Some("ps1".into())
    );
    assert_eq!(
        active("aa11", T0 + 3_600_000).await,
        None,
        "refused at expires_at"
    );
    assert_eq!(active("ffff", T0).await, None);
    // Another tenant cannot revoke it; its own revocation holds at once.
    assert!(matches!(
        store.revoke_portal_session("globex", "ps1", T0 + 2).await,
        Err(StoreError::NotFound(_))
    ));
    let revoked = store
        .revoke_portal_session("acme", "ps1", T0 + 2)
        .await
        .unwrap();
    assert_eq!(revoked.revoked_at, Some(T0 + 2));
    assert_eq!(active("aa11", T0 + 3).await, None);
    // A deleted tenant's sessions end with it.
    store
        .create_portal_session(session("ps3", "globex", "cc33"), T0)
        .await
        .unwrap();
    assert!(active("cc33", T0 + 1).await.is_some());
    store.delete_tenant("globex", T0 + 4).await.unwrap();
    assert_eq!(active("cc33", T0 + 5).await, None);
}

/// Creates `tenant` with `subscribers` subscribers named `<tenant>-<i>`, each with `cap`
/// deliveries in flight at most (`None`: the claim's default).
async fn tenant_with(store: &dyn Store, tenant_id: &str, subscribers: usize, cap: Option<u32>) {
    store.create_tenant(tenant(tenant_id), T0).await.unwrap();
    for i in 0..subscribers {
        let new = NewSubscriber {
            max_in_flight: cap,
            ..sub_of(tenant_id, &format!("{tenant_id}-{i}"), &[])
        };
        store.create_subscriber(new, T0).await.unwrap();
    }
}

/// How many of `claimed` went to each tenant (by the `<tenant>-` of its subscriber's id).
fn per_tenant(claimed: &[ClaimedDelivery]) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for c in claimed {
        let (tenant, _) = c.destination.subscriber_id.split_once('-').unwrap();
        *counts.entry(tenant.to_owned()).or_default() += 1;
    }
    counts
}

/// One tenant's burst, older in due order and larger than any claim, does not hide another
/// tenant's deliveries published after it: they are claimed beside the burst, at once.
pub(crate) async fn a_tenant_s_wall_of_older_due_rows_hides_no_other_tenant_s(h: &impl Harness) {
    let store = h.open().await;
    tenant_with(&*store, "acme", 30, None).await;
    tenant_with(&*store, "globex", 3, None).await;
    for i in 0..10 {
        accepted(
            &*store,
            event_of(Some("acme"), &format!("burst{i}"), "t"),
            T0 + i,
        )
        .await;
    }
    accepted(&*store, event_of(Some("globex"), "late", "t"), T0 + 100).await;
    // As after a restart: the store learns again that it has tenants.
    drop(store);
    let store = h.open().await;
    let request = ClaimRequest {
        slots: 512,
        ..claim(T0 + 200, 8, 100)
    };
    let claimed = store.claim_due(request).await.unwrap();
    let counts = per_tenant(&claimed);
    assert_eq!(counts.get("globex"), Some(&3), "{counts:?}");
    assert_eq!(counts.get("acme"), Some(&5), "{counts:?}");
}

/// Each tenant with deliveries due gets its share of the slots (their number over the tenants
/// with deliveries due plus the subscribers without a tenant), within its subscribers' caps,
/// less what it has in flight; what one tenant cannot use goes to the other tenants first, then
/// to anyone in due order.
pub(crate) async fn tenants_get_their_share_and_what_one_leaves_goes_to_others(h: &impl Harness) {
    let store = h.open().await;
    tenant_with(&*store, "acme", 20, None).await;
    tenant_with(&*store, "globex", 20, None).await;
    tenant_with(&*store, "initech", 1, Some(2)).await;
    for i in 0..3 {
        accepted(
            &*store,
            event_of(Some("acme"), &format!("a{i}"), "t"),
            T0 + i,
        )
        .await;
        accepted(
            &*store,
            event_of(Some("globex"), &format!("g{i}"), "t"),
            T0 + 10 + i,
        )
        .await;
        accepted(
            &*store,
            event_of(Some("initech"), &format!("i{i}"), "t"),
            T0 + 20 + i,
        )
        .await;
    }
    let now = T0 + 100;
    let claim_of = |limit| ClaimRequest {
        slots: 40,
        ..claim(now, limit, 100)
    };
    let tenants = |pairs: &[(&str, usize)]| -> std::collections::BTreeMap<String, usize> {
        pairs.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    };
    // 40 slots over three tenants and the subscribers without one: shares of 10. Initech's one
    // subscriber takes its cap of 2, and the 8 it leaves make the others' shares 12 ((40 - 2)
    // / 3); the 14 left go in due order (acme's rows, the oldest).
    let first = store.claim_due(claim_of(40)).await.unwrap();
    assert_eq!(
        per_tenant(&first),
        tenants(&[("acme", 26), ("globex", 12), ("initech", 2)])
    );
    // Globex's attempts end. Acme, with 26 in flight, is past any share; initech can take
    // nothing more (its subscriber is at its cap): globex's share of 12 has room for all 10.
    let globex: Vec<Completion> = first
        .iter()
        .filter(|c| c.destination.subscriber_id.starts_with("globex-"))
        .map(|c| completion(c, Transition::Delivered, now))
        .collect();
    store.complete(globex, now).await.unwrap();
    let second = store.claim_due(claim_of(10)).await.unwrap();
    assert_eq!(per_tenant(&second), tenants(&[("globex", 10)]));
}

/// A tenant that comes while another holds every slot borrows its share at once, past the
/// claim's free slots (the caller starts those without a slot), and never more than the other
/// holds past its own share; with nothing offered, nothing is lent.
pub(crate) async fn a_tenant_borrows_its_share_while_another_holds_every_slot(h: &impl Harness) {
    let store = h.open().await;
    tenant_with(&*store, "acme", 20, None).await;
    tenant_with(&*store, "globex", 12, None).await;
    for i in 0..3 {
        accepted(
            &*store,
            event_of(Some("acme"), &format!("a{i}"), "t"),
            T0 + i,
        )
        .await;
    }
    let now = T0 + 100;
    let claim_of = |limit, lend| ClaimRequest {
        slots: 30,
        lend,
        ..claim(now, limit, 100)
    };
    // Acme alone: its share (15, beside the subscribers without a tenant) and the rest of
    // the slots in due order.
    let every_slot = store.claim_due(claim_of(30, 0)).await.unwrap();
    assert_eq!(per_tenant(&every_slot).get("acme"), Some(&30));
    accepted(&*store, event_of(Some("globex"), "g", "t"), T0 + 50).await;
    assert!(store.claim_due(claim_of(0, 0)).await.unwrap().is_empty());
    // Shares of 10 now: acme holds 20 past its own, globex borrows its 10 of them.
    let borrowed = store.claim_due(claim_of(0, 100)).await.unwrap();
    assert_eq!(
        per_tenant(&borrowed).get("globex"),
        Some(&10),
        "{:?}",
        per_tenant(&borrowed)
    );
    assert_eq!(borrowed.len(), 10);
    // At its share, it borrows no more.
    assert!(store.claim_due(claim_of(0, 100)).await.unwrap().is_empty());
}

/// Past the walk's bound (`TENANTS_PER_CLAIM`, 256 tenants a claim): the tenants it did not
/// reach are reached by the next claim, which resumes after the last it reached, even while
/// those it reached first still have deliveries waiting and a wall of older rows fills what
/// the shares leave.
pub(crate) async fn tenants_past_the_walk_s_bound_are_reached_by_the_next_claim(h: &impl Harness) {
    let store = h.open().await;
    tenant_with(&*store, "wall", 1, Some(1000)).await;
    for i in 0..50 {
        let e = event_of(Some("wall"), &format!("w{i}"), "t");
        accepted(&*store, e, T0 + i).await;
    }
    let many: Vec<String> = (0..300).map(|i| format!("t{i:03}")).collect();
    for (i, t) in many.iter().enumerate() {
        tenant_with(&*store, t, 1, None).await;
        for n in 0..2 {
            let e = event_of(Some(t), &format!("{t}e{n}"), "t");
            accepted(&*store, e, T0 + 1_000 + i64::try_from(i).unwrap()).await;
        }
    }
    let claim_of = |limit| ClaimRequest {
        slots: 512,
        ..claim(T0 + 5_000, limit, 100)
    };
    let first = per_tenant(&store.claim_due(claim_of(260)).await.unwrap());
    for t in &many[..256] {
        assert_eq!(first.get(t), Some(&1), "{t} in the first claim: {first:?}");
    }
    for t in &many[256..] {
        assert_eq!(first.get(t), None, "{t} is past the first walk's bound");
    }
    let second = per_tenant(&store.claim_due(claim_of(60)).await.unwrap());
    for t in &many[256..] {
        assert!(
            second.contains_key(t),
            "{t} in the second claim: {second:?}"
        );
    }
}
