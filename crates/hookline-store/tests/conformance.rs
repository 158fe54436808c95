//! The one test suite every storage backend passes. Each case is written once against the
//! `Store` trait; `conformance!` instantiates all of them for a backend's harness.

use std::sync::Arc;

use hookline_policy::{DeadReason, Evidence, Outcome, Shown};
use hookline_store::testing::completion;
use hookline_store::*;

/// How a backend gives each test a fresh, isolated database, and reopens it like a restart.
#[async_trait::async_trait]
pub trait Harness: Sized {
    /// `None`: this backend cannot be tested here (the reason is printed once); skip.
    async fn fresh() -> Option<Self>;
    async fn open(&self) -> Arc<dyn Store>;
    /// Removes what `fresh` made (a test that fails leaves it behind for inspection).
    async fn cleanup(self) {}
}

struct Sqlite {
    dir: tempfile::TempDir,
}

/// Every case runs with the SQLite writer recounting what it keeps in memory from the tables
/// after each batch: a case passes only if those figures never differ from the rows.
#[async_trait::async_trait]
impl Harness for Sqlite {
    async fn fresh() -> Option<Self> {
        hookline_store::testing::recount_sqlite_figures();
        Some(Sqlite {
            dir: tempfile::tempdir().unwrap(),
        })
    }
    async fn open(&self) -> Arc<dyn Store> {
        let path = self.dir.path().join("hookline.db");
        open(&format!("sqlite://{}", path.display())).await.unwrap()
    }
    async fn cleanup(self) {
        let differences = hookline_store::testing::sqlite_figure_differences(self.dir.path());
        assert!(differences.is_empty(), "{differences:#?}");
    }
}

/// Each test gets a PostgreSQL schema of its own.
struct Postgres(hookline_store::testing::PgSchema);

#[async_trait::async_trait]
impl Harness for Postgres {
    async fn fresh() -> Option<Self> {
        hookline_store::testing::PgSchema::create()
            .await
            .map(Postgres)
    }
    async fn open(&self) -> Arc<dyn Store> {
        open(&self.0.url()).await.unwrap()
    }
    async fn cleanup(self) {
        self.0.drop_schema().await;
    }
}

macro_rules! conformance {
    ($module:ident, $harness:ty, $($case:ident),* $(,)?) => {
        mod $module {
            use super::*;
            $(
                #[tokio::test]
                async fn $case() {
                    let Some(harness) = <$harness as Harness>::fresh().await else {
                        return;
                    };
                    cases::$case(&harness).await;
                    harness.cleanup().await;
                }
            )*
        }
    };
}

macro_rules! all_cases {
    ($module:ident, $harness:ty) => {
        conformance!(
            $module,
            $harness,
            subscribers_crud,
            publish_fans_out_once,
            claims_only_due_within_caps,
            completion_is_fenced_by_the_lease,
            completions_free_slots_for_the_claim_that_follows,
            a_claim_with_completions_fills_its_limit_from_the_slots_they_free,
            a_nul_byte_in_an_id_is_the_callers_error_never_the_stores,
            a_search_matches_query_values_only_when_asked,
            rescue_returns_lost_attempts,
            pause_holds_without_spending_attempts,
            revocation_kills_pending_and_stops_fan_out,
            gone_subscribers_are_named,
            a_410_revokes_for_the_completions_after_it_in_its_batch,
            dead_letters_filter_and_page,
            dead_letters_group_by_reason_and_subscriber,
            replay_is_bounded_paced_and_audited,
            state_survives_reopen,
            prune_removes_old_delivered_only,
            rotation_keeps_the_previous_secret_for_its_grace,
            queue_stats_show_depths_and_oldest_waits,
            the_breaker_opens_defers_probes_and_closes,
            breakers_that_open_together_half_open_apart,
            a_closed_breaker_starts_slowly,
            deferred_deliveries_come_due_in_due_order,
            a_recovered_host_starts_at_one_per_subscriber,
            subscriber_caps_rate_limits_and_the_retry_budget,
            a_cap_above_the_default_is_claimed_up_to,
            a_wall_of_unclaimable_rows_hides_nobody,
            a_subscriber_used_up_mid_claim_hides_nobody,
            the_host_cap_holds_across_subscribers_and_inside_each_cap,
            a_wall_of_rows_on_a_host_at_its_cap_hides_nobody,
            deliveries_held_back_by_their_host_wait_on_its_cap,
            payload_versions_follow_each_subscribers_pin,
            replay_selects_what_was_listed_and_audits_each_outcome_once,
            waiting_deliveries_die_when_their_window_ends,
            headers_go_with_every_claim_and_patches_replace_them,
            a_heartbeat_commits,
            policies_are_named_listed_and_never_change,
            rollouts_run_one_at_a_time_and_end_once,
            cohort_reports_count_what_each_policy_decided,
            a_publish_over_its_admission_stores_nothing,
            backlog_and_meters_count_across_processes,
            backlog_waits_group_what_waits_for_a_time_or_a_rate,
            attempt_history_reads_the_recent_attempts,
        );
    };
}

all_cases!(sqlite, Sqlite);
all_cases!(postgres, Postgres);

const T0: i64 = 1_800_000_000_000;
const LEASE: i64 = 10_000;

fn sub(id: &str, types: &[&str]) -> NewSubscriber {
    NewSubscriber {
        id: id.into(),
        url: format!("http://127.0.0.1:9/{id}"),
        event_types: types.iter().map(|s| s.to_string()).collect(),
        secret: "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0".into(),
        max_in_flight: None,
        rate_limit_per_second: None,
        payload_version: None,
        headers: SubscriberHeaders::default(),
    }
}

/// A subscriber whose URL is on `origin` (a path of its own: one gateway, many subscribers).
fn sub_on(origin: &str, id: &str, types: &[&str]) -> NewSubscriber {
    NewSubscriber {
        url: format!("{origin}/hooks/{id}"),
        ..sub(id, types)
    }
}

/// A claim under a cap per host.
fn claim_per_host(now: i64, limit: usize, cap: u32, host_cap: u32) -> ClaimRequest {
    ClaimRequest {
        max_in_flight_per_host: host_cap,
        ..claim(now, limit, cap)
    }
}

/// How many of `claimed` go to each subscriber and to each of `origins` (by URL prefix).
fn spread(
    claimed: &[ClaimedDelivery],
    origin: &str,
) -> (usize, std::collections::BTreeMap<String, usize>) {
    let mut per_subscriber = std::collections::BTreeMap::new();
    for c in claimed {
        *per_subscriber
            .entry(c.destination.subscriber_id.clone())
            .or_default() += 1;
    }
    let on_origin = claimed
        .iter()
        .filter(|c| c.destination.url.starts_with(&format!("{origin}/")))
        .count();
    (on_origin, per_subscriber)
}

/// The dispatcher's caps as the gauges and the window sweep see them, with no cap per host.
fn caps(per_subscriber: u32) -> InFlightCaps {
    InFlightCaps {
        max_in_flight_per_subscriber: per_subscriber,
        max_in_flight_per_host: 0,
    }
}

fn event(id: &str, ty: &str) -> NewEvent {
    NewEvent::single(id, ty, r#"{"shipment":"SHP-20418"}"#, 1)
}

fn claim(now: i64, limit: usize, cap: u32) -> ClaimRequest {
    ClaimRequest {
        now,
        limit,
        lease_ms: LEASE,
        max_in_flight_per_subscriber: cap,
        max_in_flight_per_host: 0,
        max_retries: usize::MAX,
        exclude_subscribers: Vec::new(),
        window_ended_for_start: i64::MIN,
    }
}

async fn accepted(store: &dyn Store, e: NewEvent, now: i64) -> u64 {
    match store.publish(e, now).await.unwrap() {
        PublishOutcome::Accepted(r) => r.deliveries,
        other => panic!("expected a new event, got {other:?}"),
    }
}

/// Claims everything due and kills it, so dead-letter and replay tests have material.
async fn kill_all(store: &dyn Store, now: i64, reason: DeadReason) -> usize {
    let claimed = store.claim_due(claim(now, 1000, 1000)).await.unwrap();
    let n = claimed.len();
    let done = claimed
        .iter()
        .map(|c| completion(c, Transition::Dead(reason), now))
        .collect();
    store.complete(done, now).await.unwrap();
    n
}

mod cases {
    use super::*;

    pub async fn subscribers_crud(h: &impl Harness) {
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

    pub async fn publish_fans_out_once(h: &impl Harness) {
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
                id: "SHP-20418".into(),
                event_type: "shipment.out_for_delivery".into(),
                deliveries: 2,
                unversioned: 0,
            })
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

    pub async fn claims_only_due_within_caps(h: &impl Harness) {
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

    pub async fn completions_free_slots_for_the_claim_that_follows(h: &impl Harness) {
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
    pub async fn a_claim_with_completions_fills_its_limit_from_the_slots_they_free(
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

    /// A URL's query values may be credentials: a search matches them only when asked to (for
    /// callers who are shown them), and the URL before its query and the id always.
    pub async fn a_search_matches_query_values_only_when_asked(h: &impl Harness) {
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
    pub async fn a_nul_byte_in_an_id_is_the_callers_error_never_the_stores(h: &impl Harness) {
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

    pub async fn completion_is_fenced_by_the_lease(h: &impl Harness) {
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

    pub async fn rescue_returns_lost_attempts(h: &impl Harness) {
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

    pub async fn pause_holds_without_spending_attempts(h: &impl Harness) {
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
    pub async fn gone_subscribers_are_named(h: &impl Harness) {
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

    pub async fn revocation_kills_pending_and_stops_fan_out(h: &impl Harness) {
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
    pub async fn a_410_revokes_for_the_completions_after_it_in_its_batch(h: &impl Harness) {
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

    pub async fn dead_letters_filter_and_page(h: &impl Harness) {
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

    pub async fn dead_letters_group_by_reason_and_subscriber(h: &impl Harness) {
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
        let all = store.dead_letter_groups(i64::MIN, 100).await.unwrap();
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
            store.dead_letter_groups(i64::MIN, 1).await.unwrap(),
            all[..1]
        );
        assert_eq!(
            store.dead_letters_by_reason(i64::MIN).await.unwrap(),
            [
                (DeadReason::AttemptsExhausted, 6),
                (DeadReason::PermanentFailure, 1)
            ]
        );
        assert_eq!(
            store.dead_letters_by_reason(T0 + 2).await.unwrap(),
            [(DeadReason::PermanentFailure, 1)]
        );
        // Only those that died since.
        assert_eq!(
            store.dead_letter_groups(T0 + 2, 100).await.unwrap(),
            all[2..]
        );
        // A replayed dead letter leaves its group.
        store
            .replay(
                ReplayRequest {
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
            store.dead_letter_groups(i64::MIN, 100).await.unwrap(),
            all[..2]
        );
    }

    pub async fn replay_is_bounded_paced_and_audited(h: &impl Harness) {
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
            .list_replays(ListOrder::OldestFirst, 10, None)
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
            .list_replays(ListOrder::OldestFirst, 100, None)
            .await
            .unwrap();
        let ids = |p: &Page<Replay>| p.items.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
        assert!(oldest.items.len() >= 2, "{:?}", ids(&oldest));
        let mut newest = ids(&oldest);
        newest.reverse();
        let first = store
            .list_replays(ListOrder::NewestFirst, 1, None)
            .await
            .unwrap();
        let rest = store
            .list_replays(ListOrder::NewestFirst, 100, first.next_cursor.clone())
            .await
            .unwrap();
        assert_eq!([ids(&first), ids(&rest)].concat(), newest);
    }

    pub async fn state_survives_reopen(h: &impl Harness) {
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

    pub async fn prune_removes_old_delivered_only(h: &impl Harness) {
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

    pub async fn headers_go_with_every_claim_and_patches_replace_them(h: &impl Harness) {
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

    pub async fn policies_are_named_listed_and_never_change(h: &impl Harness) {
        let store = h.open().await;
        let policy = |name: &str, definition: &str| StoredPolicy {
            name: name.into(),
            definition: definition.into(),
            created_at: T0,
            created_by: Some("oncall".into()),
        };
        let first = store
            .create_policy(policy("retry-520", r#"{"retryable":[520]}"#))
            .await
            .unwrap();
        assert_eq!(store.get_policy("retry-520").await.unwrap(), first);
        assert!(matches!(
            store.create_policy(policy("retry-520", "{}")).await,
            Err(StoreError::Conflict(_))
        ));
        assert_eq!(
            store.get_policy("retry-520").await.unwrap().definition,
            r#"{"retryable":[520]}"#,
            "the refused one changed nothing"
        );
        assert!(matches!(
            store.get_policy("nope").await,
            Err(StoreError::NotFound(_))
        ));
        for name in ["b", "c"] {
            store.create_policy(policy(name, "{}")).await.unwrap();
        }
        let page = store.list_policies(2, None).await.unwrap();
        let names: Vec<&str> = page.items.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["retry-520", "b"]);
        let rest = store.list_policies(2, page.next_cursor).await.unwrap();
        assert_eq!((rest.items.len(), rest.next_cursor), (1, None));
        drop(store);
        let reopened = h.open().await;
        assert_eq!(reopened.get_policy("c").await.unwrap().name, "c");
    }

    pub async fn a_heartbeat_commits(h: &impl Harness) {
        let store = h.open().await;
        store.heartbeat(T0).await.unwrap();
        store.heartbeat(T0 + 1).await.unwrap();
    }

    pub async fn rotation_keeps_the_previous_secret_for_its_grace(h: &impl Harness) {
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

    pub async fn queue_stats_show_depths_and_oldest_waits(h: &impl Harness) {
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

    /// With the default breaker (5 consecutive retryable failures, 30 s cool-down).
    pub async fn the_breaker_opens_defers_probes_and_closes(h: &impl Harness) {
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
    pub async fn deferred_deliveries_come_due_in_due_order(h: &impl Harness) {
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
        for (rank, id) in ["e1:a", "e2:a", "e0:a", "e4:a", "e3:a"].iter().enumerate() {
            let d = store.get_delivery(id).await.unwrap();
            assert_eq!(d.next_attempt_at, Some(open_until + rank as i64), "{id}");
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
    pub async fn a_recovered_host_starts_at_one_per_subscriber(h: &impl Harness) {
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
    pub async fn a_closed_breaker_starts_slowly(h: &impl Harness) {
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
    pub async fn breakers_that_open_together_half_open_apart(h: &impl Harness) {
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

    pub async fn subscriber_caps_rate_limits_and_the_retry_budget(h: &impl Harness) {
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
    pub async fn a_cap_above_the_default_is_claimed_up_to(h: &impl Harness) {
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
    pub async fn a_wall_of_unclaimable_rows_hides_nobody(h: &impl Harness) {
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
    pub async fn the_host_cap_holds_across_subscribers_and_inside_each_cap(h: &impl Harness) {
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
            store.get_subscriber("c").await.unwrap().origin,
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
    pub async fn deliveries_held_back_by_their_host_wait_on_its_cap(h: &impl Harness) {
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
        assert_eq!(store.expire_windows(sweep).await.unwrap(), 5);
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

    pub async fn a_wall_of_rows_on_a_host_at_its_cap_hides_nobody(h: &impl Harness) {
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
    pub async fn a_subscriber_used_up_mid_claim_hides_nobody(h: &impl Harness) {
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

    pub async fn payload_versions_follow_each_subscribers_pin(h: &impl Harness) {
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

    /// Dead letters are listed oldest dead first (then by key), the order a replay selects in:
    /// listing N and replaying N with the same filter takes exactly those N, and a dry run
    /// names them without changing anything. A delivery replayed twice counts in the later
    /// replay's audit only.
    pub async fn replay_selects_what_was_listed_and_audits_each_outcome_once(h: &impl Harness) {
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
            .list_replays(ListOrder::OldestFirst, 10, None)
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

    /// Every delivery not in flight ends when its window does, whatever it waits on (an open
    /// breaker, a pause, a rate limit, a full cap, its own retry time), and says what that
    /// was; deliveries in flight are left to their attempt's outcome.
    pub async fn waiting_deliveries_die_when_their_window_ends(h: &impl Harness) {
        let store = h.open().await;
        let retry =
            |c: &ClaimedDelivery, run_at| completion(c, Transition::Reschedule { run_at }, T0);
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
        assert_eq!(store.expire_windows(sweep).await.unwrap(), 13);
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
                    reason: Some(DeadReason::WindowExpired),
                    subscriber_id: Some("paused".into()),
                },
                10,
                None,
            )
            .await
            .unwrap();
        assert_eq!(letters.items[0].waiting_on, Some(WaitingOn::Paused));
        assert_eq!(
            store.expire_windows(sweep).await.unwrap(),
            0,
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

    fn rollout(id: &str, policy: &str, started_at: i64) -> Rollout {
        Rollout {
            id: id.into(),
            policy: policy.into(),
            baseline: "default".into(),
            basis_points: 500,
            subscriber_ids: vec!["listed".into()],
            abort_if: Some(AbortIf {
                terminal_rate_increase: 0.05,
                min_deliveries: 200,
            }),
            state: RolloutState::Running,
            reason: None,
            started_at,
            ended_at: None,
            created_by: Some("oncall".into()),
        }
    }

    pub async fn rollouts_run_one_at_a_time_and_end_once(h: &impl Harness) {
        let store = h.open().await;
        assert_eq!(
            store.policies_in_force().await.unwrap(),
            PoliciesInForce::default()
        );
        let first = store
            .start_rollout(rollout("ro_1", "cf", T0))
            .await
            .unwrap();
        assert_eq!(store.get_rollout("ro_1").await.unwrap(), first);
        let second = store.start_rollout(rollout("ro_2", "other", T0)).await;
        assert!(matches!(second, Err(StoreError::Conflict(_))), "{second:?}");
        assert!(matches!(
            store.get_rollout("ro_2").await,
            Err(StoreError::NotFound(_))
        ));
        let raised = store
            .change_rollout("ro_1", RolloutChange::Share(5_000), T0 + 1)
            .await
            .unwrap();
        assert_eq!(raised.basis_points, 5_000);
        let in_force = store.policies_in_force().await.unwrap();
        assert_eq!((in_force.default, in_force.rollout), (None, Some(raised)));

        let aborted = store
            .change_rollout(
                "ro_1",
                RolloutChange::Abort {
                    reason: "worse".into(),
                },
                T0 + 2,
            )
            .await
            .unwrap();
        assert_eq!(
            (aborted.state, aborted.reason.as_deref(), aborted.ended_at),
            (RolloutState::Aborted, Some("worse"), Some(T0 + 2))
        );
        // An ended rollout changes no more, and the refusal changes nothing.
        for change in [RolloutChange::Promote, RolloutChange::Share(100)] {
            let again = store.change_rollout("ro_1", change, T0 + 3).await;
            assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
        }
        assert_eq!(store.get_rollout("ro_1").await.unwrap(), aborted);
        assert!(matches!(
            store
                .change_rollout("nope", RolloutChange::Promote, T0)
                .await,
            Err(StoreError::NotFound(_))
        ));
        assert_eq!(
            store.policies_in_force().await.unwrap(),
            PoliciesInForce::default(),
            "an abort leaves the default as it was"
        );

        // With none running, the next starts; promoting it makes its policy everyone's.
        store
            .start_rollout(rollout("ro_2", "cf", T0 + 4))
            .await
            .unwrap();
        store
            .change_rollout("ro_2", RolloutChange::Promote, T0 + 5)
            .await
            .unwrap();
        // A start that missed the promotion (its baseline is not in force) changes nothing.
        let stale = store.start_rollout(rollout("ro_3", "later", T0 + 6)).await;
        assert!(matches!(stale, Err(StoreError::Conflict(_))), "{stale:?}");
        let mut fresh = rollout("ro_3", "later", T0 + 6);
        fresh.baseline = "cf".into();
        store.start_rollout(fresh).await.unwrap();
        store
            .change_rollout("ro_3", RolloutChange::Promote, T0 + 7)
            .await
            .unwrap();
        drop(store);
        let store = h.open().await;
        let in_force = store.policies_in_force().await.unwrap();
        assert_eq!(
            (in_force.default.as_deref(), in_force.rollout),
            (Some("later"), None),
            "the policy promoted last is in force"
        );
        let page = store.list_rollouts(2, None).await.unwrap();
        let ids: Vec<&str> = page.items.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["ro_1", "ro_2"]);
        let rest = store.list_rollouts(2, page.next_cursor).await.unwrap();
        assert_eq!(rest.items[0].subscriber_ids, ["listed"]);
        assert_eq!(rest.items[0].abort_if, rollout("x", "y", 0).abort_if);
    }

    pub async fn cohort_reports_count_what_each_policy_decided(h: &impl Harness) {
        let store = h.open().await;
        for id in ["a", "b", "c"] {
            store.create_subscriber(sub(id, &["t"]), T0).await.unwrap();
        }
        let decided_by = |c: &ClaimedDelivery, transition, policy: &str, at: i64| {
            let mut done = completion(c, transition, at);
            done.record.policy = Some(policy.into());
            done.record.duration_ms = 10;
            done
        };
        // Before the range: not counted.
        accepted(&*store, event("early", "t"), T0).await;
        let early = store.claim_due(claim(T0, 10, 10)).await.unwrap();
        let done = early
            .iter()
            .map(|c| decided_by(c, Transition::Delivered, "cf", T0))
            .collect();
        store.complete(done, T0).await.unwrap();

        // In range: a and b by "cf" (a delivered after a retry, b dead), c by "default".
        let t1 = T0 + 1_000;
        accepted(&*store, event("e1", "t"), t1).await;
        let claimed = store.claim_due(claim(t1 + 5, 10, 10)).await.unwrap();
        assert_eq!(claimed.len(), 3);
        let retry_at = t1 + 100;
        let done = claimed
            .iter()
            .map(|c| match c.destination.subscriber_id.as_str() {
                "a" => decided_by(c, Transition::Reschedule { run_at: retry_at }, "cf", t1 + 5),
                "b" => decided_by(
                    c,
                    Transition::Dead(DeadReason::AttemptsExhausted),
                    "cf",
                    t1 + 5,
                ),
                _ => decided_by(c, Transition::Delivered, "default", t1 + 5),
            })
            .collect();
        store.complete(done, t1 + 5).await.unwrap();
        let again = store.claim_due(claim(retry_at, 10, 10)).await.unwrap();
        assert_eq!(again.len(), 1);
        let done = vec![decided_by(&again[0], Transition::Delivered, "cf", retry_at)];
        store.complete(done, retry_at).await.unwrap();

        let report = |policy: &str| {
            store.cohort_report(CohortQuery {
                policy: policy.into(),
                since: t1,
                until: t1 + 10_000,
            })
        };
        let cf = report("cf").await.unwrap();
        assert_eq!(
            (cf.subscribers, cf.deliveries, cf.delivered, cf.dead),
            (2, 2, 1, 1)
        );
        assert_eq!((cf.retry_attempts, cf.retried), (1, 1));
        assert_eq!(
            cf.dead_by_reason,
            [("attempts_exhausted".to_owned(), 1)].into()
        );
        // From the event's acceptance to the end of the first attempt: 5 ms queued + 10 ms.
        assert_eq!(
            (
                cf.first_attempt_latency_p50_ms,
                cf.first_attempt_latency_p99_ms
            ),
            (Some(15), Some(15))
        );
        let default = report("default").await.unwrap();
        assert_eq!(
            (
                default.deliveries,
                default.delivered,
                default.retry_attempts
            ),
            (1, 1, 0)
        );
        assert_eq!(report("none").await.unwrap(), CohortReport::default());
    }

    pub async fn a_publish_over_its_admission_stores_nothing(h: &impl Harness) {
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

    pub async fn attempt_history_reads_the_recent_attempts(h: &impl Harness) {
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

    pub async fn backlog_waits_group_what_waits_for_a_time_or_a_rate(h: &impl Harness) {
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
        let breaker_after = ((open_until - now) as u64).div_ceil(1_000) * 1_000;
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

    pub async fn backlog_and_meters_count_across_processes(h: &impl Harness) {
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
}
