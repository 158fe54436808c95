//! How many deliveries each subscriber has waiting (`state = 'scheduled'`), kept by the writer
//! as it writes them. A claim's scan leaves out, in SQL, the subscribers it cannot take from,
//! but SQLite still walks each of their due rows to reject it: with one subscriber at its cap
//! and thousands of its deliveries due, every claim walked them all to find nothing. When every
//! subscriber with waiting deliveries is left out, the claim knows that without the walk.
//!
//! The serving process's write connection is the only writer of the file that moves rows (a
//! second `serve` is refused by the serving store's lock, `serve_lock`; `migrate`, `prune` and
//! `backup` move none into or out of `scheduled`), so the counts are exact from the rows
//! counted at start on. A job or a batch that is rolled back takes its changes to the counts with it (`mark`,
//! `roll_back_to`): a count left too low would skip a scan that had rows to find, one left too
//! high only loses a saving. In case a count is too low all the same (a write path that forgot
//! them, an older release serving the file beside this one), claims trust the counts only for
//! a second after a claim that read every scan in full.

use std::collections::HashMap;

use rusqlite::Connection;

use hookline_policy::UnixMs;

use crate::Result;

/// How long after a claim that read every scan in full later claims may skip on the counts.
const TRUSTED_FOR_MS: i64 = 1_000;
/// Changes kept allocated between batches: a batch of large fan-outs logs one per delivery.
const KEPT_CHANGES: usize = 4_096;
/// The page cache the count at start reads through, in pages.
const LOAD_CACHE_PAGES: i64 = 64;

pub(super) struct ScheduledCounts {
    counts: HashMap<String, u32>,
    /// Each change since the last commit, as applied: undone in reverse on a rollback.
    changes: Vec<(String, i64)>,
    /// When a claim last read every scan in full (`claimed_in_full`).
    full_claim_at: Option<UnixMs>,
}

/// Where the changes of a job begin, to undo them if it fails.
#[derive(Clone, Copy)]
pub(super) struct Mark(usize);

impl ScheduledCounts {
    /// Counts the waiting rows (through the window index, which holds exactly them), here rather
    /// than with a `GROUP BY`, whose sort of every row would hold its memory. It reads the table
    /// page of each row: through a small page cache, or the connection would fill and keep its
    /// whole cache with them (32 MiB with a large backlog).
    pub fn load(conn: &Connection) -> Result<Self> {
        let cache_size: i64 = conn.pragma_query_value(None, "cache_size", |r| r.get(0))?;
        conn.pragma_update(None, "cache_size", LOAD_CACHE_PAGES)?;
        let counted = Self::count(conn);
        conn.pragma_update(None, "cache_size", cache_size)?;
        Ok(Self {
            counts: counted?,
            changes: Vec::new(),
            full_claim_at: None,
        })
    }

    fn count(conn: &Connection) -> Result<HashMap<String, u32>> {
        let mut counts: HashMap<String, u32> = HashMap::new();
        let mut stmt = conn.prepare(super::queries::WAITING)?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            let id = row.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?;
            match counts.get_mut(id) {
                Some(n) => *n = n.saturating_add(1),
                None => {
                    counts.insert(id.to_owned(), 1);
                }
            }
        }
        Ok(counts)
    }

    /// `n` more of `subscriber_id`'s deliveries wait.
    pub fn add(&mut self, subscriber_id: &str, n: u32) {
        if n > 0 {
            self.apply(subscriber_id, i64::from(n));
        }
    }

    /// `n` of `subscriber_id`'s waiting deliveries left that state.
    pub fn remove(&mut self, subscriber_id: &str, n: u32) {
        let counted = self.counts.get(subscriber_id).copied().unwrap_or(0);
        let n = n.min(counted);
        if n > 0 {
            self.apply(subscriber_id, -i64::from(n));
        }
    }

    fn apply(&mut self, subscriber_id: &str, delta: i64) {
        self.changes.push((subscriber_id.to_owned(), delta));
        self.change(subscriber_id, delta);
    }

    fn change(&mut self, subscriber_id: &str, delta: i64) {
        let count = match self.counts.get_mut(subscriber_id) {
            Some(count) => count,
            None => self.counts.entry(subscriber_id.to_owned()).or_default(),
        };
        // Saturating at the top: a count wrapped to zero would be too low.
        *count = (i64::from(*count) + delta).clamp(0, i64::from(u32::MAX)) as u32;
        if *count == 0 {
            self.counts.remove(subscriber_id);
        }
    }

    pub fn mark(&self) -> Mark {
        Mark(self.changes.len())
    }

    /// Undoes the changes made since `mark` (a failed job's).
    pub fn roll_back_to(&mut self, mark: Mark) {
        while self.changes.len() > mark.0 {
            let (subscriber_id, delta) = self.changes.pop().expect("longer than the mark");
            self.change(&subscriber_id, -delta);
        }
    }

    /// The batch's transaction committed: its changes stand.
    pub fn committed(&mut self) {
        self.changes.clear();
        self.changes.shrink_to(KEPT_CHANGES);
    }

    /// The batch's transaction was rolled back: so are its changes.
    pub fn rolled_back(&mut self) {
        self.roll_back_to(Mark(0));
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
    async fn counts(store: &SqliteStore) -> (HashMap<String, u32>, HashMap<String, u32>) {
        store
            .writer
            .write(|w| {
                Ok((
                    w.scheduled.counts.clone(),
                    ScheduledCounts::load(&w.conn)?.counts,
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
        let expected = expected
            .iter()
            .map(|(id, n)| (id.to_string(), *n))
            .collect();
        assert_eq!(rows, expected, "after {after}");
    }

    #[tokio::test]
    async fn the_counts_follow_every_write_that_moves_a_waiting_delivery() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hookline.db");
        let store = SqliteStore::open(path.to_str().unwrap(), false)
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

    fn among<'a>(ids: &'a [&str]) -> impl Fn(&str) -> bool + 'a {
        move |id| ids.contains(&id)
    }

    #[test]
    fn a_rolled_back_job_takes_its_changes_with_it() {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::schema::migrate(&mut conn).unwrap();
        let mut counts = ScheduledCounts::load(&conn).unwrap();
        assert!(counts.all_left_out(among(&[])), "nothing waits");
        assert!(!counts.trusted(0), "not before a claim read in full");
        counts.claimed_in_full(1_000);
        assert!(counts.trusted(1_000) && counts.trusted(1_999));
        assert!(!counts.trusted(2_000) && !counts.trusted(999));

        counts.add("a", 2);
        counts.committed();
        assert!(!counts.all_left_out(among(&[])));
        assert!(counts.all_left_out(among(&["a", "b"])));

        // A job takes both of a's and adds one of b's, then fails.
        let mark = counts.mark();
        counts.remove("a", 2);
        counts.add("b", 1);
        assert!(counts.all_left_out(among(&["b"])));
        counts.roll_back_to(mark);
        assert!(!counts.all_left_out(among(&["b"])), "a's two wait again");
        assert!(counts.all_left_out(among(&["a"])), "b's one is gone");

        // A batch whose commit failed: everything since the last commit is undone.
        counts.remove("a", 1);
        counts.add("c", 3);
        counts.rolled_back();
        assert_eq!(counts.counts, HashMap::from([("a".to_string(), 2)]));

        // Removing more than is counted removes what is there, and undoes exactly that.
        let mark = counts.mark();
        counts.remove("a", 5);
        assert!(counts.all_left_out(among(&[])));
        counts.roll_back_to(mark);
        assert_eq!(counts.counts, HashMap::from([("a".to_string(), 2)]));
    }
}
