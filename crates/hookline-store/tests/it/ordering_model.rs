//! A property of ordering keys over long random runs, on both backends: deliveries of one
//! subscriber and key are attempted one at a time in publish order (an attempt of a later one
//! never starts while an earlier one is in flight or waiting to retry), so what each subscriber
//! receives of a key is in publish order; and every delivery ends within its window, never
//! attempted after it. Failures, retries, deaths and windows ending are drawn at random; the
//! clock is the test's.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use hookline_policy::DeadReason;
use hookline_store::testing::completion;
use hookline_store::*;
use proptest::prelude::*;

const T0: i64 = 1_700_000_000_000;
const WINDOW_MS: i64 = 2_000;
const SUBSCRIBERS: [&str; 2] = ["s0", "s1"];
const KEYS: [Option<&str>; 3] = [Some("k0"), Some("k1"), None];

/// What happens to one attempt.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Delivered,
    /// Fails and retries after this many ms.
    Retry(i64),
    Dead,
    /// Stays in flight for a step.
    Slow,
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        4 => Just(Fate::Delivered),
        3 => (50i64..900).prop_map(Fate::Retry),
        1 => Just(Fate::Dead),
        2 => Just(Fate::Slow),
    ]
}

#[derive(Debug, Clone)]
struct Run {
    /// Each event's key (by index into KEYS) and the ms after the previous publish.
    events: Vec<(usize, i64)>,
    fates: Vec<Fate>,
    /// The clock's steps between claims.
    steps: Vec<i64>,
}

fn run() -> impl Strategy<Value = Run> {
    (
        prop::collection::vec((0..KEYS.len(), 0i64..300), 4..24),
        prop::collection::vec(fate(), 64),
        prop::collection::vec(10i64..400, 64),
    )
        .prop_map(|(events, fates, steps)| Run {
            events,
            fates,
            steps,
        })
}

fn subscriber(id: &str) -> NewSubscriber {
    NewSubscriber {
        tenant_id: None,
        id: id.into(),
        url: format!("http://127.0.0.1:9/{id}"),
        event_types: Vec::new(),
        secret: "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0".into(),
        max_in_flight: None,
        rate_limit_per_second: None,
        payload_version: None,
        headers: SubscriberHeaders::default(),
    }
}

fn claim(now: i64) -> ClaimRequest {
    ClaimRequest {
        now,
        limit: 100,
        slots: 100,
        lend: 0,
        lease_ms: 60_000,
        max_in_flight_per_subscriber: 100,
        max_in_flight_per_host: 0,
        max_retries: usize::MAX,
        exclude_subscribers: Vec::new(),
        window_ended_for_start: now - WINDOW_MS,
    }
}

/// Plays `run` on `store` and checks the properties; the error says which broke.
async fn play(store: Arc<dyn Store>, run: Run) -> Result<(), String> {
    for id in SUBSCRIBERS {
        store.create_subscriber(subscriber(id), T0).await.unwrap();
    }
    // Event id -> (publish index, key, window start).
    let mut published: HashMap<String, (usize, Option<&str>, i64)> = HashMap::new();
    let mut now = T0;
    for (i, (key, after)) in run.events.iter().enumerate() {
        now += after;
        let id = format!("e{i}");
        let mut e = NewEvent::single(&id, "shipment.updated", "{}", 1);
        e.ordering_key = KEYS[*key].map(str::to_owned);
        store.publish(e, now).await.unwrap();
        published.insert(id, (i, KEYS[*key], now));
    }
    let line = |c: &ClaimedDelivery| {
        let (index, key, start) = published[&c.event.id];
        (c.destination.subscriber_id.clone(), key, index, start)
    };
    let mut in_flight: Vec<ClaimedDelivery> = Vec::new();
    // (subscriber, key) -> the publish indices attempted, and delivered, in order.
    let mut attempted: BTreeMap<(String, Option<&str>), Vec<usize>> = BTreeMap::new();
    let mut delivered: BTreeMap<(String, Option<&str>), Vec<usize>> = BTreeMap::new();
    // Delivery id -> when a completion ended it.
    let mut ended_at: HashMap<String, i64> = HashMap::new();
    let mut fates = run.fates.iter().cycle();
    let end = now + 4 * WINDOW_MS;
    let mut steps = run.steps.iter().cycle();
    while now < end {
        now += steps.next().unwrap();
        let sweep = WindowSweep {
            now,
            window_ms: WINDOW_MS,
            caps: InFlightCaps {
                max_in_flight_per_subscriber: 100,
                max_in_flight_per_host: 0,
            },
            limit: 1_000,
        };
        store.expire_windows(sweep).await.unwrap();
        for c in store.claim_due(claim(now)).await.unwrap() {
            let (subscriber, key, index, start) = line(&c);
            if now > start + WINDOW_MS {
                return Err(format!("{} attempted at {now}, after its window", c.id));
            }
            if let Some(key) = key {
                let busy = in_flight.iter().any(|o| {
                    let (s, k, _, _) = line(o);
                    s == subscriber && k == Some(key)
                });
                if busy {
                    return Err(format!("{} attempted beside another of {key}", c.id));
                }
            }
            attempted.entry((subscriber, key)).or_default().push(index);
            in_flight.push(c);
        }
        let mut still = Vec::new();
        let mut done = Vec::new();
        for c in in_flight.drain(..) {
            let transition = match fates.next().unwrap() {
                Fate::Delivered => Transition::Delivered,
                Fate::Retry(ms) => Transition::Reschedule { run_at: now + ms },
                Fate::Dead => Transition::Dead(DeadReason::PermanentFailure),
                Fate::Slow => {
                    still.push(c);
                    continue;
                }
            };
            if matches!(transition, Transition::Delivered) {
                let (subscriber, key, index, _) = line(&c);
                delivered.entry((subscriber, key)).or_default().push(index);
            }
            if !matches!(transition, Transition::Reschedule { .. }) {
                ended_at.insert(c.id.clone(), now);
            }
            done.push(completion(&c, transition, now));
        }
        in_flight = still;
        if !done.is_empty() {
            store.complete(done, now).await.unwrap();
        }
    }
    for ((subscriber, key), indices) in attempted.iter().chain(&delivered) {
        if key.is_some() {
            // A key's attempts start in publish order (retries repeat the last).
            let mut sorted = indices.clone();
            sorted.sort();
            if &sorted != indices {
                return Err(format!("{subscriber} {key:?} out of order: {indices:?}"));
            }
        }
    }
    // A delivery whose window ended while it waited on its key had one ahead of it then: the
    // end of the one ahead released it.
    let mut deliveries: HashMap<String, Delivery> = HashMap::new();
    for id in published.keys() {
        for s in SUBSCRIBERS {
            let d = store.get_delivery(&format!("{id}:{s}")).await.unwrap();
            deliveries.insert(d.id.clone(), d);
        }
    }
    let end_of = |d: &Delivery| ended_at.get(&d.id).copied().or(d.dead_at);
    for d in deliveries.values() {
        if d.waiting_on != Some(WaitingOn::Ordering) || d.state != DeliveryState::Dead {
            continue;
        }
        let (index, key, _) = published[&d.event_id];
        let died = d.dead_at.unwrap();
        let ahead = deliveries.values().any(|o| {
            let (i, k, _) = published[&o.event_id];
            o.subscriber_id == d.subscriber_id
                && k == key
                && i < index
                && end_of(o).is_none_or(|t| t >= died)
        });
        if !ahead {
            return Err(format!("{} died waiting on its key with none ahead", d.id));
        }
    }
    // Every delivery has ended: delivered, or dead (of its window at the latest), but those
    // the run left in flight.
    let stats = store.queue_stats(end, caps(), &[]).await.unwrap();
    if stats.counts.scheduled != 0 {
        return Err(format!("{} deliveries never ended", stats.counts.scheduled));
    }
    Ok(())
}

fn caps() -> InFlightCaps {
    InFlightCaps {
        max_in_flight_per_subscriber: 100,
        max_in_flight_per_host: 0,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn sqlite_attempts_each_key_in_order_within_windows() {
    let runtime = runtime();
    proptest!(ProptestConfig::with_cases(48), |(r in run())| {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("hookline.db").display());
        let outcome = runtime.block_on(async { play(open(&url).await.unwrap(), r).await });
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    });
}

#[test]
fn postgres_attempts_each_key_in_order_within_windows() {
    let runtime = runtime();
    proptest!(ProptestConfig::with_cases(12), |(r in run())| {
        let outcome = runtime.block_on(async {
            let Some(schema) = testing::PgSchema::create().await else {
                return Ok(());
            };
            let outcome = play(open(&schema.url()).await.unwrap(), r).await;
            schema.drop_schema().await;
            outcome
        });
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    });
}

/// A line left with its first delivery waiting and nothing ahead of it (an ending that
/// released nothing: an older release serving the file, here an update by hand) is repaired by
/// the next window sweep: that delivery goes.
#[test]
fn the_sweep_releases_a_line_left_waiting_with_nothing_ahead() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hookline.db");
        let store = open(&format!("sqlite://{}", path.display())).await.unwrap();
        store.create_subscriber(subscriber("s"), T0).await.unwrap();
        for id in ["e1", "e2"] {
            let mut e = NewEvent::single(id, "shipment.updated", "{}", 1);
            e.ordering_key = Some("k".into());
            store.publish(e, T0).await.unwrap();
        }
        drop(store);
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute(
                "UPDATE deliveries SET state = 'dead', dead_reason = 'permanent_failure', \
                 dead_at = ?1, run_at = NULL WHERE id = 'e1:s'",
                [T0],
            )
            .unwrap();
        let store = open(&format!("sqlite://{}", path.display())).await.unwrap();
        assert!(store.claim_due(claim(T0 + 1)).await.unwrap().is_empty());
        let sweep = WindowSweep {
            now: T0 + 1,
            window_ms: WINDOW_MS,
            caps: caps(),
            limit: 1_000,
        };
        assert!(store.expire_windows(sweep).await.unwrap().is_empty());
        let claimed = store.claim_due(claim(T0 + 2)).await.unwrap();
        assert_eq!(
            claimed.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
            ["e2:s"]
        );
    });
}
