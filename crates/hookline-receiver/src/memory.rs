//! An in-memory store, bounded: it remembers the last `capacity` committed ids (the oldest
//! committed is forgotten first) and every id being handled now. It lives and dies with the
//! process, so it suits side effects that are themselves in memory, and tests; a receiver
//! whose side effects outlive it wants [`SqliteStore`](crate::SqliteStore) or
//! [`PostgresStore`](crate::PostgresStore).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::dedup::{checked_id, Claim, Claimed, DedupStore, Outcome, StoreError};

enum Entry {
    /// A claim is open; a duplicate waits to be told it ended.
    InFlight(Arc<Notify>),
    Done(Outcome),
}

struct Seen {
    entries: HashMap<String, Entry>,
    /// Committed ids, oldest first: what is forgotten past the capacity.
    committed: VecDeque<String>,
    capacity: usize,
}

/// Seen ids in memory, at most `capacity` committed ones (FIFO eviction).
#[derive(Clone)]
pub struct MemoryStore(Arc<Mutex<Seen>>);

impl MemoryStore {
    /// Remembers up to `capacity` committed ids (at least one).
    pub fn new(capacity: usize) -> Self {
        MemoryStore(Arc::new(Mutex::new(Seen {
            entries: HashMap::new(),
            committed: VecDeque::new(),
            capacity: capacity.max(1),
        })))
    }

    /// Committed ids remembered now.
    pub fn len(&self) -> usize {
        self.lock().committed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        // A panic elsewhere while holding it leaves the maps whole: every change is one insert
        // or remove.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl DedupStore for MemoryStore {
    type Claim = MemoryClaim;

    async fn claim(&self, id: &str) -> Result<Claimed<MemoryClaim>, StoreError> {
        let id = checked_id(id)?;
        loop {
            let ended = {
                let mut seen = self.lock();
                match seen.entries.get(id) {
                    Some(Entry::Done(outcome)) => return Ok(Claimed::Duplicate(outcome.clone())),
                    Some(Entry::InFlight(ended)) => ended.clone(),
                    None => {
                        let ended = Arc::new(Notify::new());
                        seen.entries.insert(id.to_owned(), Entry::InFlight(ended));
                        return Ok(Claimed::New(MemoryClaim {
                            store: self.clone(),
                            id: Some(id.to_owned()),
                        }));
                    }
                }
            };
            // Registered before the lock is taken again, so an end in between is not missed.
            let mut notified = std::pin::pin!(ended.notified());
            notified.as_mut().enable();
            if self.still_in_flight(id, &ended) {
                notified.await;
            }
        }
    }
}

impl MemoryStore {
    fn still_in_flight(&self, id: &str, ended: &Arc<Notify>) -> bool {
        matches!(self.lock().entries.get(id), Some(Entry::InFlight(n)) if Arc::ptr_eq(n, ended))
    }

    /// Ends `id`'s claim: recorded with `outcome`, or forgotten; tells whoever waits on it.
    fn end(&self, id: String, outcome: Option<Outcome>) {
        let mut seen = self.lock();
        let ended = match outcome {
            Some(outcome) => {
                seen.committed.push_back(id.clone());
                let previous = seen.entries.insert(id, Entry::Done(outcome));
                while seen.committed.len() > seen.capacity {
                    if let Some(oldest) = seen.committed.pop_front() {
                        seen.entries.remove(&oldest);
                    }
                }
                previous
            }
            None => seen.entries.remove(&id),
        };
        if let Some(Entry::InFlight(ended)) = ended {
            ended.notify_waiters();
        }
    }
}

/// An open claim on an id in a [`MemoryStore`]; dropped without a commit, the id is free again.
pub struct MemoryClaim {
    store: MemoryStore,
    /// Taken by the commit, so that the drop after it does nothing.
    id: Option<String>,
}

impl std::fmt::Debug for MemoryClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryClaim")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Claim for MemoryClaim {
    async fn commit(mut self, outcome: Outcome) -> Result<Outcome, StoreError> {
        if let Some(id) = self.id.take() {
            self.store.end(id, Some(outcome.clone()));
        }
        Ok(outcome)
    }
}

impl Drop for MemoryClaim {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.store.end(id, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(body: &str) -> Outcome {
        Outcome::new(200, body).unwrap()
    }

    async fn run(store: &MemoryStore, id: &str, body: &str) -> Option<Outcome> {
        match store.claim(id).await.unwrap() {
            Claimed::New(claim) => {
                claim.commit(ok(body)).await.unwrap();
                None
            }
            Claimed::Duplicate(outcome) => Some(outcome),
        }
    }

    #[tokio::test]
    async fn a_duplicate_gets_the_recorded_outcome_and_the_oldest_is_forgotten_past_the_bound() {
        let store = MemoryStore::new(2);
        assert_eq!(run(&store, "a", "first").await, None);
        assert_eq!(run(&store, "a", "again").await, Some(ok("first")));
        assert_eq!(run(&store, "b", "b").await, None);
        assert_eq!(run(&store, "c", "c").await, None);
        assert_eq!(store.len(), 2);
        assert_eq!(run(&store, "a", "new").await, None, "a was evicted");
        assert_eq!(run(&store, "c", "x").await, Some(ok("c")));
    }

    #[tokio::test]
    async fn a_dropped_claim_records_nothing_and_a_waiting_duplicate_runs() {
        let store = MemoryStore::new(10);
        let Claimed::New(first) = store.claim("a").await.unwrap() else {
            panic!("new")
        };
        let waiter = tokio::spawn({
            let store = store.clone();
            async move { store.claim("a").await.unwrap() }
        });
        tokio::task::yield_now().await;
        assert!(
            !waiter.is_finished(),
            "the duplicate waits for the open claim"
        );
        drop(first);
        let Claimed::New(second) = waiter.await.unwrap() else {
            panic!("the dropped claim recorded nothing")
        };
        let waiter = tokio::spawn({
            let store = store.clone();
            async move { store.claim("a").await.unwrap() }
        });
        second.commit(ok("done")).await.unwrap();
        assert!(matches!(waiter.await.unwrap(), Claimed::Duplicate(o) if o == ok("done")));
    }

    #[tokio::test]
    async fn bad_ids_are_refused() {
        let store = MemoryStore::new(1);
        assert!(matches!(store.claim("").await, Err(StoreError::InvalidId)));
        assert!(matches!(
            store.claim("a\nb").await,
            Err(StoreError::InvalidId)
        ));
        assert!(store.is_empty());
    }
}
