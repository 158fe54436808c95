//! How many deliveries each subscriber has waiting (`state = 'scheduled'`), kept by the writer
//! as it writes them. A claim's scan leaves out, in SQL, the subscribers it cannot take from,
//! but SQLite still walks each of their due rows to reject it: with one subscriber at its cap
//! and thousands of its deliveries due, every claim walked them all to find nothing. When every
//! subscriber with waiting deliveries is left out, the claim knows that without the walk.
//!
//! The serving process's write connection is the only writer of the file that moves rows (a
//! second `serve` is refused by the serving store's lock, `serve_lock`; `migrate`, `prune` and
//! `backup` move none into or out of `scheduled`), and every write that moves one goes through
//! the writer's transitions (`writer/state.rs`), which undo their changes with a rolled-back
//! job or batch: so the counts are exact from the rows counted at start on, and test builds
//! recount them after every batch. A count left too low would skip a scan that had rows to
//! find, one too high only loses a saving; in case one is too low all the same (an older
//! release, without the serving lock, serving the file beside this one), claims trust the
//! counts only for a second after a claim that read every scan in full.

use std::collections::HashMap;

use rusqlite::Connection;

use hookline_policy::UnixMs;

use crate::Result;

/// How long after a claim that read every scan in full later claims may skip on the counts.
const TRUSTED_FOR_MS: i64 = 1_000;
/// The page cache the count at start reads through, in pages.
const LOAD_CACHE_PAGES: i64 = 64;

pub(super) struct ScheduledCounts {
    /// No entry for a count of zero: the keys are the subscribers with deliveries waiting.
    counts: HashMap<String, u32>,
    /// When a claim last read every scan in full (`claimed_in_full`).
    full_claim_at: Option<UnixMs>,
}

impl ScheduledCounts {
    /// Counts the waiting rows. It reads the table page of each row: through a small page
    /// cache, or the connection would fill and keep its whole cache with them (32 MiB with a
    /// large backlog).
    pub fn load(conn: &Connection) -> Result<Self> {
        let cache_size: i64 = conn.pragma_query_value(None, "cache_size", |r| r.get(0))?;
        conn.pragma_update(None, "cache_size", LOAD_CACHE_PAGES)?;
        let counted = Self::count(conn);
        conn.pragma_update(None, "cache_size", cache_size)?;
        Ok(Self {
            counts: counted?,
            full_claim_at: None,
        })
    }

    /// The waiting rows per subscriber, counted through the window index, which holds exactly
    /// them, here rather than with a `GROUP BY`, whose sort of every row would hold its memory.
    fn count(conn: &Connection) -> Result<HashMap<String, u32>> {
        let mut counts = HashMap::new();
        let mut stmt = conn.prepare(super::queries::WAITING)?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            let id = row.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?;
            change(&mut counts, id, 1);
        }
        Ok(counts)
    }

    /// Moves `subscriber_id`'s count by `delta`, and answers the change made, what undoes it
    /// exactly (for the writer's transitions, `writer/state.rs`).
    pub fn change(&mut self, subscriber_id: &str, delta: i64) -> i64 {
        change(&mut self.counts, subscriber_id, delta)
    }

    /// Whether a claim at `now` may skip or cut short a scan on the counts' word: within
    /// [`TRUSTED_FOR_MS`] of the last claim that read every scan in full.
    pub fn trusted(&self, now: UnixMs) -> bool {
        self.full_claim_at
            .is_some_and(|at| (at..at.saturating_add(TRUSTED_FOR_MS)).contains(&now))
    }

    pub fn claimed_in_full(&mut self, now: UnixMs) {
        self.full_claim_at = Some(now);
    }

    /// Whether every subscriber with deliveries waiting is `left_out` of a scan: then the scan
    /// can find nothing.
    pub fn all_left_out(&self, left_out: impl Fn(&str) -> bool) -> bool {
        self.counts.keys().all(|id| left_out(id))
    }

    /// The counts in subscriber order.
    #[cfg(any(test, feature = "testing"))]
    pub fn sorted(&self) -> Vec<(String, u32)> {
        sorted(&self.counts)
    }

    /// How the counts differ from the rows counted afresh, in words.
    #[cfg(any(test, feature = "testing"))]
    pub fn difference_from_rows(&self, conn: &Connection) -> Result<Option<String>> {
        let counted = Self::count(conn)?;
        Ok((counted != self.counts).then(|| {
            format!(
                "deliveries waiting per subscriber: kept {:?}, counted from the rows {:?}",
                self.sorted(),
                sorted(&counted)
            )
        }))
    }
}

/// Moves `subscriber_id`'s count in `counts` by `delta`, kept within `0..=u32::MAX` (a count
/// wrapped to zero would be too low) and with no entry for zero; answers the change made.
fn change(counts: &mut HashMap<String, u32>, subscriber_id: &str, delta: i64) -> i64 {
    let before = counts.get(subscriber_id).copied().unwrap_or(0);
    let after = u32::try_from(i64::from(before).saturating_add(delta).max(0)).unwrap_or(u32::MAX);
    if after == 0 {
        counts.remove(subscriber_id);
    } else if let Some(count) = counts.get_mut(subscriber_id) {
        *count = after;
    } else {
        counts.insert(subscriber_id.to_owned(), after);
    }
    i64::from(after) - i64::from(before)
}

#[cfg(any(test, feature = "testing"))]
fn sorted(counts: &HashMap<String, u32>) -> Vec<(String, u32)> {
    let mut sorted: Vec<_> = counts.iter().map(|(id, n)| (id.clone(), *n)).collect();
    sorted.sort();
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::SqliteStore;
    use crate::*;
    use hookline_policy::{BreakerConfig, DeadReason, Outcome};

    const T0: i64 = 1_800_000_000_000;

    fn subscriber(id: &str, pin: Option<i64>) -> NewSubscriber {
        NewSubscriber {
            tenant_id: None,
            id: id.into(),
            url: format!("http://127.0.0.1:9/{id}"),
            event_types: Vec::new(),
            secret: "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0".into(),
            max_in_flight: None,
            rate_limit_per_second: None,
            payload_version: pin,
            headers: SubscriberHeaders::default(),
        }
    }

    fn claim(now: i64) -> ClaimRequest {
        ClaimRequest {
            now,
            limit: 100,
            slots: 100,
            lend: 0,
            lease_ms: 10_000,
            max_in_flight_per_subscriber: 100,
            max_in_flight_per_host: 0,
            max_retries: usize::MAX,
            exclude_subscribers: Vec::new(),
            window_ended_for_start: i64::MIN,
        }
    }

    fn completion(c: &ClaimedDelivery, transition: Transition, now: i64) -> Completion {
        Completion {
            key: c.key,
            lease: c.lease,
            record: AttemptRecord {
                ordinal: c.attempt,
                started_at: now,
                duration_ms: 1,
                outcome: match transition {
                    Transition::Delivered => Outcome::Success,
                    _ => Outcome::Retryable,
                },
                status: Some(503),
                error: None,
                response_body: None,
                policy: None,
            },
            transition,
            revoke_subscriber: false,
            breaker: BreakerConfig {
                failures: u32::MAX,
                cool_down: std::time::Duration::from_secs(30),
                max_cool_down: std::time::Duration::from_secs(300),
            },
        }
    }

    /// The writer's counts, and the rows counted afresh.
    async fn counts(store: &SqliteStore) -> (Vec<(String, u32)>, Vec<(String, u32)>) {
        store
            .writer
            .write(|w| {
                Ok((
                    w.state.scheduled().sorted(),
                    sorted(&ScheduledCounts::count(&w.conn)?),
                ))
            })
            .await
            .unwrap()
    }

    async fn assert_counts(store: &SqliteStore, after: &str, expected: &[(&str, u32)]) {
        let (kept, rows) = counts(store).await;
        assert_eq!(
            kept, rows,
            "after {after}: kept by the writer, then counted from the rows"
        );
        let expected: Vec<_> = expected
            .iter()
            .map(|(id, n)| (id.to_string(), *n))
            .collect();
        assert_eq!(rows, expected, "after {after}");
    }

    #[tokio::test]
    async fn the_counts_follow_every_write_that_moves_a_waiting_delivery() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hookline.db");
        let store = SqliteStore::open(path.to_str().unwrap(), &OpenOptions::default())
            .await
            .unwrap();
        for (id, pin) in [("a", None), ("b", None), ("paused", None), ("old", Some(0))] {
            store
                .create_subscriber(subscriber(id, pin), T0)
                .await
                .unwrap();
        }
        let pause = SubscriberPatch {
            status: Some(SubscriberStatus::Paused),
            ..Default::default()
        };
        store.update_subscriber("paused", pause, T0).await.unwrap();
        let event = |id: &str| NewEvent::single(id, "t", "{}", 1);

        // A fan-out: held rows wait too; one with no version for its pin dies at once.
        store.publish(event("e1"), T0).await.unwrap();
        assert_counts(&store, "a publish", &[("a", 1), ("b", 1), ("paused", 1)]).await;
        // A publish refused for want of room is rolled back, counts and all.
        let mut refused = event("e2");
        refused.admit_at_most = Some(1);
        assert!(store.publish(refused, T0).await.is_err());
        assert_counts(
            &store,
            "a refused publish",
            &[("a", 1), ("b", 1), ("paused", 1)],
        )
        .await;

        let claimed = store.claim_due(claim(T0)).await.unwrap();
        assert_eq!(claimed.len(), 2);
        assert_counts(&store, "a claim", &[("paused", 1)]).await;

        // A retry waits again; a delivery and a death do not.
        let (a, b) = (&claimed[0], &claimed[1]);
        let done = vec![
            completion(a, Transition::Reschedule { run_at: T0 + 10 }, T0),
            completion(b, Transition::Dead(DeadReason::PermanentFailure), T0),
        ];
        store.complete(done, T0).await.unwrap();
        assert_counts(&store, "completions", &[("a", 1), ("paused", 1)]).await;

        // Completing and claiming in one job: the retry is taken, and dies.
        store.publish(event("e3"), T0 + 10).await.unwrap();
        assert_counts(
            &store,
            "another publish",
            &[("a", 2), ("b", 1), ("paused", 2)],
        )
        .await;
        let claimed = store.claim_due(claim(T0 + 10)).await.unwrap();
        assert_eq!(claimed.len(), 3);
        let done = claimed
            .iter()
            .map(|c| completion(c, Transition::Dead(DeadReason::PermanentFailure), T0 + 10))
            .collect();
        let (completing, again) = store.complete_and_claim(done, claim(T0 + 10)).await;
        completing.await.unwrap();
        assert!(again.unwrap().is_empty());
        assert_counts(&store, "complete and claim", &[("paused", 2)]).await;

        // A replay puts dead letters back to wait.
        let replay = ReplayRequest {
            tenant_id: None,
            reason: DeadReason::PermanentFailure,
            subscriber_id: None,
            limit: 100,
            per_second: None,
            requested_by: None,
            expected: None,
        };
        store.replay(replay, T0 + 20).await.unwrap();
        assert_counts(&store, "a replay", &[("a", 2), ("b", 2), ("paused", 2)]).await;

        // An answer that revokes the subscription kills what waits for it.
        let one_each = ClaimRequest {
            max_in_flight_per_subscriber: 1,
            ..claim(T0 + 20)
        };
        let claimed = store.claim_due(one_each).await.unwrap();
        assert_eq!(claimed.len(), 2);
        assert_counts(
            &store,
            "a claim of one each",
            &[("a", 1), ("b", 1), ("paused", 2)],
        )
        .await;
        let done = claimed
            .iter()
            .map(|c| {
                let mut done = completion(c, Transition::Delivered, T0 + 20);
                if c.destination.subscriber_id == "b" {
                    done.transition = Transition::Dead(DeadReason::SubscriptionRevoked);
                    done.revoke_subscriber = true;
                }
                done
            })
            .collect();
        store.complete(done, T0 + 20).await.unwrap();
        assert_counts(&store, "a revoking answer", &[("a", 1), ("paused", 2)]).await;

        // So does a revocation through the API, held rows too.
        store.revoke_subscriber("paused", T0 + 20).await.unwrap();
        assert_counts(&store, "a revocation", &[("a", 1)]).await;

        // So does the end of a window.
        let sweep = WindowSweep {
            now: T0 + 1_000_000,
            window_ms: 1_000,
            caps: InFlightCaps {
                max_in_flight_per_subscriber: 100,
                max_in_flight_per_host: 64,
            },
            limit: 100,
        };
        store.expire_windows(sweep).await.unwrap();
        assert_counts(&store, "a window sweep", &[]).await;
    }
}
