//! What only a shared database needs, beyond the conformance suite: several store instances
//! (as in several processes) on one PostgreSQL schema.

use std::time::Duration;

use std::sync::Arc;

use hookline_store::testing::{self, PgSchema};
use hookline_store::*;

/// Two stores ("processes") on a fresh schema; `None` without a PostgreSQL to test (skip).
async fn two_stores() -> Option<(Arc<dyn Store>, Arc<dyn Store>, PgSchema)> {
    let schema = PgSchema::create().await?;
    // Both start at once: the migrations must serialize, not collide.
    let url = schema.url();
    let (a, b) = tokio::join!(open(&url), open(&url));
    Some((a.unwrap(), b.unwrap(), schema))
}

const T0: i64 = 1_800_000_000_000;

fn subscriber(id: &str) -> NewSubscriber {
    NewSubscriber {
        tenant_id: None,
        id: id.into(),
        url: "http://127.0.0.1:9/x".into(),
        event_types: vec![],
        secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
        max_in_flight: None,
        rate_limit_per_second: None,
        payload_version: None,
        headers: Default::default(),
    }
}

fn event(id: &str) -> NewEvent {
    NewEvent::single(id, "t", "{}", 1)
}

/// Publishes `{prefix}0` .. `{prefix}{n-1}`, the i-th at `from + i`.
async fn publish_each(store: &dyn Store, prefix: &str, n: i64, from: i64) {
    for i in 0..n {
        store
            .publish(event(&format!("{prefix}{i}")), from + i)
            .await
            .unwrap();
    }
}

/// A claim at `now` of at most `limit`, each subscriber capped at `cap`.
fn claim(now: i64, limit: usize, cap: u32) -> ClaimRequest {
    ClaimRequest {
        now,
        limit,
        slots: limit,
        lend: 0,
        lease_ms: 60_000,
        max_in_flight_per_subscriber: cap,
        max_in_flight_per_host: 0,
        max_retries: usize::MAX,
        exclude_subscribers: Vec::new(),
        window_ended_for_start: i64::MIN,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_in_one_process_wakes_the_others() {
    let Some((a, b, schema)) = two_stores().await else {
        return;
    };
    let wake = a.wakeups().expect("a shared store announces new work");
    b.create_subscriber(subscriber("s"), T0).await.unwrap();
    // Drain the wake-up the listener sends when it (re)connects.
    let _ = tokio::time::timeout(Duration::from_millis(500), wake.notified()).await;
    b.publish(event("e1"), T0).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), wake.notified())
        .await
        .expect("NOTIFY reached the other store");
    drop((a, b));
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_flight_cap_holds_across_processes() {
    let Some((a, b, schema)) = two_stores().await else {
        return;
    };
    a.create_subscriber(subscriber("s"), T0).await.unwrap();
    for i in 0..50 {
        a.publish(event(&format!("e{i}")), T0).await.unwrap();
    }
    let request = || claim(T0, 10, 3);
    // Both claim at the same moment, many times over.
    let mut claimed = 0;
    for _ in 0..5 {
        let (x, y) = tokio::join!(a.claim_due(request()), b.claim_due(request()));
        claimed += x.unwrap().len() + y.unwrap().len();
    }
    assert_eq!(
        claimed, 3,
        "never more than the cap in flight, whichever process claims"
    );
    drop((a, b));
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_never_lease_a_delivery_twice() {
    let Some((a, b, schema)) = two_stores().await else {
        return;
    };
    for s in 0..20 {
        a.create_subscriber(subscriber(&format!("s{s}")), T0)
            .await
            .unwrap();
    }
    for i in 0..50 {
        a.publish(event(&format!("e{i}")), T0).await.unwrap();
    }
    let request = || claim(T0, 64, 1000);
    let mut seen = std::collections::HashSet::new();
    loop {
        let (x, y) = tokio::join!(a.claim_due(request()), b.claim_due(request()));
        let (x, y) = (x.unwrap(), y.unwrap());
        if x.is_empty() && y.is_empty() {
            break;
        }
        for c in x.into_iter().chain(y) {
            assert!(seen.insert(c.id.clone()), "{} leased twice", c.id);
        }
    }
    assert_eq!(seen.len(), 1000);
    drop((a, b));
    schema.drop_schema().await;
}

/// A worker's claim runs beside its completions (two connections) and answers without waiting
/// for them: what they free at a subscriber's cap is the next claim's once they have
/// committed. Made certain here by holding a row the completions must update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_beside_completions_answers_before_they_commit() {
    let Some((store, other, schema)) = two_stores().await else {
        return;
    };
    store.create_subscriber(subscriber("a"), T0).await.unwrap();
    publish_each(&*store, "e", 6, T0).await;
    store.create_subscriber(subscriber("b"), T0).await.unwrap();
    publish_each(&*store, "f", 2, T0 + 10).await;
    let request = |now, limit| claim(now, limit, 2);
    let now = T0 + 1_000;
    let first = store.claim_due(request(now, 2)).await.unwrap();
    let ids: Vec<&str> = first.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["e0:a", "e1:a"], "a at its cap");
    let done: Vec<Completion> = first
        .iter()
        .map(|c| testing::completion(c, Transition::Delivered, now))
        .collect();

    let (holder, connection) = tokio_postgres::connect(&schema.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    holder
        .batch_execute(
            "BEGIN; SELECT 1 FROM deliveries WHERE event_id = 'e0' AND subscriber_id = 'a' FOR UPDATE",
        )
        .await
        .unwrap();
    // The claim answers while the completions are held: a still at its cap, so b's two.
    let (completing, claimed) = tokio::time::timeout(
        Duration::from_secs(30),
        store.complete_and_claim(done, request(now + 1, 3)),
    )
    .await
    .expect("the claim does not wait for the held completions");
    let mut ids: Vec<String> = claimed.unwrap().into_iter().map(|c| c.id).collect();
    ids.sort();
    assert_eq!(ids, ["f0:b", "f1:b"]);
    let completing = tokio::spawn(completing);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!completing.is_finished(), "its completions are still held");
    assert_eq!(
        other.get_delivery("e0:a").await.unwrap().state,
        DeliveryState::InFlight,
        "the completions still wait"
    );
    holder.batch_execute("COMMIT").await.unwrap();
    let completed = tokio::time::timeout(Duration::from_secs(30), completing)
        .await
        .expect("the completions go on once the row is free")
        .unwrap();
    assert_eq!(completed.unwrap(), [CompletionResult::Applied; 2]);
    // The next claim takes the slots they freed (a at its cap of 2 again).
    let next = store.claim_due(request(now + 2, 3)).await.unwrap();
    let ids: Vec<&str> = next.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["e2:a", "e3:a"], "the slots a's completions freed");
    drop((store, other));
    schema.drop_schema().await;
}

/// Completions that fail (here PostgreSQL refuses a NUL byte in text) do not take the claim
/// beside them down: what it leased comes back to be sent, and the completions to be retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_completions_leave_the_claim_beside_them_standing() {
    let Some((store, _other, schema)) = two_stores().await else {
        return;
    };
    store.create_subscriber(subscriber("a"), T0).await.unwrap();
    publish_each(&*store, "e", 4, T0).await;
    let request = |now, limit| claim(now, limit, 16);
    let now = T0 + 1_000;
    let first = store.claim_due(request(now, 1)).await.unwrap();
    let mut refused = testing::completion(&first[0], Transition::Delivered, now);
    refused.record.response_body = Some("a\0b".into());
    let (completing, claimed) = store
        .complete_and_claim(vec![refused], request(now + 1, 10))
        .await;
    assert!(completing.await.is_err(), "the completion is refused");
    let mut ids: Vec<String> = claimed.unwrap().into_iter().map(|c| c.id).collect();
    ids.sort();
    assert_eq!(ids, ["e1:a", "e2:a", "e3:a"], "leased, and handed back");
    assert_eq!(
        store.get_delivery("e0:a").await.unwrap().state,
        DeliveryState::InFlight,
        "not completed"
    );
    drop(store);
    schema.drop_schema().await;
}

/// A schema a newer release contracted (recorded as needing 99.0.0) is refused with both
/// versions named, and the number hookline 0.1.0 reads was raised so that it refuses too.
#[tokio::test]
async fn a_schema_needing_a_newer_hookline_is_refused_naming_both_versions() {
    let Some(schema) = PgSchema::create().await else {
        return;
    };
    let url = schema.url();
    drop(open(&url).await.unwrap());
    let status = schema_status(&url).await.unwrap();
    assert!(
        status.pending.is_empty() && status.compatible.is_ok(),
        "{status:?}"
    );
    assert_eq!(status.min_binary.to_string(), "0.1.0");
    schema
        .sql(&[
            "INSERT INTO hookline_schema (number, min_binary, description, applied_by)
             VALUES (99, '99.0.0', 'drop a column older releases read', '99.0.0')",
            "INSERT INTO hookline_migrations (version) VALUES (9)",
        ])
        .await;
    let e = open(&url).await.err().expect("refused").to_string();
    assert!(e.contains("needs hookline 99.0.0 or later"), "{e}");
    assert!(
        e.contains(&format!("this is hookline {}", Version::current())),
        "{e}"
    );
    let status = schema_status(&url).await.unwrap();
    assert_eq!(
        (status.version, status.min_binary.to_string().as_str()),
        (99, "99.0.0")
    );
    assert!(status.compatible.is_err());
    schema.drop_schema().await;
}

/// A failure PostgreSQL answered keeps its SQLSTATE, for callers to match on, and the driver's
/// error as its cause.
#[tokio::test]
async fn a_database_failure_keeps_its_sqlstate_and_its_cause() {
    let Some(schema) = PgSchema::create().await else {
        return;
    };
    let (client, connection) = tokio_postgres::connect(&schema.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let failure = StoreError::from(client.simple_query("SELECT 1/0").await.unwrap_err());
    assert_eq!(failure.sqlstate(), Some("22012"), "{failure}");
    assert!(
        failure.to_string().contains("division by zero"),
        "{failure}"
    );
    let StoreError::Backend(backend) = &failure else {
        panic!("{failure:?} is not a backend failure");
    };
    let cause = std::error::Error::source(backend).expect("the driver's error is kept");
    assert!(cause.downcast_ref::<tokio_postgres::Error>().is_some());
}

/// A number out of the model's range (a negative count of failures, which only a row written
/// by something else holds) is an error naming the column, not a number wrapped into another.
#[tokio::test]
async fn a_number_out_of_range_is_a_corrupt_row() {
    let Some((store, _, schema)) = two_stores().await else {
        return;
    };
    store.create_subscriber(subscriber("s"), T0).await.unwrap();
    schema
        .sql(&["UPDATE subscribers SET breaker_failures = -1 WHERE id = 's'"])
        .await;
    let e = store.get_subscriber("s").await.unwrap_err().to_string();
    assert!(
        e.contains("unexpected breaker_failures \"-1\" in the database"),
        "{e}"
    );
    schema.drop_schema().await;
}

/// One process publishes a key's events one after another while another claims and delivers
/// them as fast as it can, each a separate transaction racing the other's: every delivery is
/// attempted once, in publish order, never two of the key at once, and none is left waiting
/// (a publish that saw an earlier delivery on its way is released when that one ends, however
/// the two commits interleave).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_s_publishes_racing_its_deliveries_stay_in_order() {
    let Some((publisher, worker, schema)) = two_stores().await else {
        return;
    };
    const EVENTS: usize = 200;
    publisher
        .create_subscriber(subscriber("s"), T0)
        .await
        .unwrap();
    let publishing = tokio::spawn(async move {
        for i in 0..EVENTS {
            let mut e = event(&format!("e{i:03}"));
            e.ordering_key = Some("SHP-1".into());
            publisher
                .publish(e, T0 + i64::try_from(i).unwrap())
                .await
                .unwrap();
        }
    });
    let mut attempted = Vec::new();
    let mut idle_rounds = 0;
    let now = T0 + 1_000_000;
    while attempted.len() < EVENTS && idle_rounds < 2_000 {
        let claimed = worker.claim_due(claim(now, 100, 100)).await.unwrap();
        assert!(claimed.len() <= 1, "two of one key at once: {claimed:?}");
        if claimed.is_empty() {
            idle_rounds += 1;
            tokio::task::yield_now().await;
            continue;
        }
        idle_rounds = 0;
        attempted.push(claimed[0].event.id.clone());
        let done = vec![testing::completion(&claimed[0], Transition::Delivered, now)];
        worker.complete(done, now).await.unwrap();
    }
    publishing.await.unwrap();
    // Whatever the race left: the sweep's repair, then the rest.
    while attempted.len() < EVENTS {
        let sweep = WindowSweep {
            now,
            window_ms: 10_000_000,
            caps: InFlightCaps {
                max_in_flight_per_subscriber: 100,
                max_in_flight_per_host: 0,
            },
            limit: 1_000,
        };
        worker.expire_windows(sweep).await.unwrap();
        let claimed = worker.claim_due(claim(now, 100, 100)).await.unwrap();
        assert_eq!(claimed.len(), 1, "after {} of {EVENTS}", attempted.len());
        attempted.push(claimed[0].event.id.clone());
        let done = vec![testing::completion(&claimed[0], Transition::Delivered, now)];
        worker.complete(done, now).await.unwrap();
    }
    let mut sorted = attempted.clone();
    sorted.sort();
    assert_eq!(attempted, sorted, "in publish order");
    sorted.dedup();
    assert_eq!(sorted.len(), EVENTS, "each once");
    schema.drop_schema().await;
}
