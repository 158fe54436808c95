//! What only a shared database needs, beyond the conformance suite: several store instances
//! (as in several processes) on one PostgreSQL schema.

use std::time::Duration;

use hookline_store::*;

async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!("PostgreSQL tests need a server at HOOKLINE_TEST_POSTGRES ({url}): {e}")
        });
    tokio::spawn(connection);
    client
}

/// Two stores ("processes") on a fresh schema; the schema is dropped by `finish`.
async fn two_stores() -> (
    std::sync::Arc<dyn Store>,
    std::sync::Arc<dyn Store>,
    String,
    String,
) {
    let base = std::env::var("HOOKLINE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let schema = format!("hl_test_{:016x}", rand::random::<u64>());
    admin(&base)
        .await
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
    // Both start at once: the migrations must serialize, not collide.
    let (a, b) = tokio::join!(open(&url), open(&url));
    (a.unwrap(), b.unwrap(), base, schema)
}

async fn finish(base: &str, schema: &str) {
    admin(base)
        .await
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
}

const T0: i64 = 1_800_000_000_000;

fn subscriber(id: &str) -> NewSubscriber {
    NewSubscriber {
        id: id.into(),
        url: "http://127.0.0.1:9/x".into(),
        event_types: vec![],
        secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
    }
}

fn event(id: &str) -> NewEvent {
    NewEvent {
        id: id.into(),
        event_type: "t".into(),
        payload: "{}".into(),
        payload_version: 1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_in_one_process_wakes_the_others() {
    let (a, b, base, schema) = two_stores().await;
    let wake = a.wakeups().expect("a shared store announces new work");
    b.create_subscriber(subscriber("s"), T0).await.unwrap();
    // Drain the wake-up the listener sends when it (re)connects.
    let _ = tokio::time::timeout(Duration::from_millis(500), wake.notified()).await;
    b.publish(event("e1"), T0).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), wake.notified())
        .await
        .expect("NOTIFY reached the other store");
    drop((a, b));
    finish(&base, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_flight_cap_holds_across_processes() {
    let (a, b, base, schema) = two_stores().await;
    a.create_subscriber(subscriber("s"), T0).await.unwrap();
    for i in 0..50 {
        a.publish(event(&format!("e{i}")), T0).await.unwrap();
    }
    let request = || ClaimRequest {
        now: T0,
        limit: 10,
        lease_ms: 60_000,
        max_in_flight_per_subscriber: 3,
    };
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
    finish(&base, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_never_lease_a_delivery_twice() {
    let (a, b, base, schema) = two_stores().await;
    for s in 0..20 {
        a.create_subscriber(subscriber(&format!("s{s}")), T0)
            .await
            .unwrap();
    }
    for i in 0..50 {
        a.publish(event(&format!("e{i}")), T0).await.unwrap();
    }
    let request = || ClaimRequest {
        now: T0,
        limit: 64,
        lease_ms: 60_000,
        max_in_flight_per_subscriber: 1000,
    };
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
    finish(&base, &schema).await;
}
