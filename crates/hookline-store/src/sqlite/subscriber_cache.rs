//! Subscribers as claims last read them. A claim reads the subscriber of every due row it
//! considers; in a steady run those rows do not change, and reading them again on every claim
//! was a fifth of the claim's time. The write connection is the only writer of the file
//! (`serve_lock`), and SQLite's update hook on it reports every row it
//! changes in `subscribers`: that row is forgotten the moment it changes. A rollback forgets
//! them all: a row read between a change and its rollback would otherwise outlive it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rusqlite::hooks::Action;
use rusqlite::Connection;

use super::reads;
use crate::{Result, Subscriber};

/// What the cache may hold, in (approximate) bytes: a fleet whose rows exceed it is read as
/// before, no worse, and the memory stays bounded whatever outsiders store in a row.
const BUDGET_BYTES: usize = 16 << 20;

pub(super) struct SubscriberCache {
    /// Shared with the update hook, which runs on the writer thread inside the statement that
    /// changed the row.
    rows: Arc<Mutex<Rows>>,
    budget: usize,
}

#[derive(Default)]
struct Rows {
    by_id: HashMap<String, Arc<Subscriber>>,
    /// Each cached row's id by its rowid (`seq`), which is what the hook reports.
    ids: HashMap<i64, String>,
    bytes: usize,
}

impl Rows {
    fn forget_row(&mut self, key: i64) {
        if let Some(id) = self.ids.remove(&key) {
            if let Some(gone) = self.by_id.remove(&id) {
                self.bytes -= footprint(&gone);
            }
        }
    }
}

impl SubscriberCache {
    pub fn watch(conn: &mut Connection) -> Result<Self> {
        Self::with_budget(conn, BUDGET_BYTES)
    }

    fn with_budget(conn: &mut Connection, budget: usize) -> Result<Self> {
        let rows: Arc<Mutex<Rows>> = Default::default();
        let seen = rows.clone();
        conn.update_hook(Some(move |_: Action, _: &str, table: &str, key: i64| {
            if table == "subscribers" {
                locked(&seen).forget_row(key);
            }
        }))?;
        Ok(Self { rows, budget })
    }

    pub fn get(&mut self, c: &Connection, id: &str) -> Result<Arc<Subscriber>> {
        if let Some(found) = locked(&self.rows).by_id.get(id) {
            return Ok(found.clone());
        }
        // Read without holding the lock: the hook takes it.
        let (key, subscriber) = reads::keyed_subscriber(c, id)?;
        let found = Arc::new(subscriber);
        let size = footprint(&found);
        if size <= self.budget {
            let mut rows = locked(&self.rows);
            if rows.bytes + size > self.budget {
                *rows = Rows::default();
            }
            rows.bytes += size;
            rows.ids.insert(key, id.to_owned());
            rows.by_id.insert(id.to_owned(), found.clone());
        }
        Ok(found)
    }

    pub fn forget(&mut self) {
        *locked(&self.rows) = Rows::default();
    }

    /// Each kept row that is not the row in the table now, in words (test builds: the writer's
    /// recount after every batch).
    #[cfg(any(test, feature = "testing"))]
    pub fn differences(&self, c: &Connection) -> Result<Vec<String>> {
        let (kept, bytes) = {
            let rows = locked(&self.rows);
            let kept: Vec<(i64, Arc<Subscriber>)> = rows
                .ids
                .iter()
                .filter_map(|(key, id)| Some((*key, rows.by_id.get(id)?.clone())))
                .collect();
            if kept.len() != rows.by_id.len() || kept.len() != rows.ids.len() {
                return Ok(vec![format!(
                    "the subscriber cache keeps {} rows under {} ids and {} row keys",
                    kept.len(),
                    rows.by_id.len(),
                    rows.ids.len()
                )]);
            }
            (kept, rows.bytes)
        };
        let mut differences = Vec::new();
        for (key, subscriber) in &kept {
            match reads::keyed_subscriber(c, &subscriber.id) {
                Ok((row_key, row)) if row_key == *key && row == **subscriber => {}
                Ok((row_key, row)) => differences.push(format!(
                    "subscriber {:?} kept as {subscriber:?} (row {key}), the table has \
                     {row:?} (row {row_key})",
                    subscriber.id
                )),
                Err(crate::StoreError::NotFound(_)) => differences.push(format!(
                    "subscriber {:?} kept, but the table has no such row",
                    subscriber.id
                )),
                Err(e) => return Err(e),
            }
        }
        let counted: usize = kept.iter().map(|(_, s)| footprint(s)).sum();
        if counted != bytes {
            differences.push(format!(
                "the subscriber cache counts {bytes} bytes, its rows take {counted}"
            ));
        }
        Ok(differences)
    }
}

/// The rows, even after a panic elsewhere held the lock: the maps are never left half-changed,
/// and a hook that stopped forgetting rows would leave stale ones.
fn locked(rows: &Mutex<Rows>) -> MutexGuard<'_, Rows> {
    rows.lock().unwrap_or_else(PoisonError::into_inner)
}

/// About what a cached row holds: the row, and each string's bytes and header (the id three
/// times: in the row and as a key of both maps).
fn footprint(s: &Subscriber) -> usize {
    let string = |s: &String| std::mem::size_of::<String>() + s.len();
    std::mem::size_of::<Subscriber>()
        + 3 * string(&s.id)
        + s.url.len()
        + s.secret.len()
        + s.previous_secret.as_ref().map_or(0, string)
        + s.event_types.iter().map(string).sum::<usize>()
        + s.headers
            .0
            .iter()
            .map(|(k, v)| string(k) + string(v))
            .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscriber(c: &Connection, id: &str) {
        c.execute(
            "INSERT INTO subscribers (id, url, event_types, secret, status, created_at, updated_at)
             VALUES (?1, 'https://one.example/hook', '[]', 'whsec_c2VjcmV0', 'active', 0, 0)",
            [id],
        )
        .unwrap();
    }

    fn set_url(c: &Connection, id: &str, url: &str) {
        c.execute("UPDATE subscribers SET url = ?2 WHERE id = ?1", [id, url])
            .unwrap();
    }

    /// A store on a file, so that a second connection can change a row without the hook
    /// seeing it: what the cache then answers shows whether it kept the row.
    fn store() -> (tempfile::TempDir, Connection, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let mut writer = Connection::open(&path).unwrap();
        super::super::schema::migrate(&mut writer).unwrap();
        let other = Connection::open(&path).unwrap();
        (dir, writer, other)
    }

    #[test]
    fn a_change_forgets_that_row_and_only_that_row() {
        let (_dir, mut c, other) = store();
        for id in ["a", "b"] {
            subscriber(&c, id);
        }
        let mut cache = SubscriberCache::watch(&mut c).unwrap();
        for id in ["a", "b"] {
            assert_eq!(cache.get(&c, id).unwrap().url, "https://one.example/hook");
        }
        set_url(&c, "a", "https://two.example/hook");
        // Behind the hook's back: the cache still answers its copy of b.
        set_url(&other, "b", "https://elsewhere.example/hook");
        assert_eq!(cache.get(&c, "a").unwrap().url, "https://two.example/hook");
        assert_eq!(cache.get(&c, "b").unwrap().url, "https://one.example/hook");

        // An unknown subscriber is an error, not a cached absence.
        assert!(matches!(
            cache.get(&c, "nobody"),
            Err(crate::StoreError::NotFound(_))
        ));
    }

    #[test]
    fn the_cache_stays_within_its_budget() {
        let (_dir, mut c, _) = store();
        let ids: Vec<String> = (0..10).map(|i| format!("sub-{i}")).collect();
        for id in &ids {
            subscriber(&c, id);
        }
        let one = footprint(&reads::keyed_subscriber(&c, "sub-0").unwrap().1);
        let mut cache = SubscriberCache::with_budget(&mut c, 3 * one).unwrap();
        for id in &ids {
            cache.get(&c, id).unwrap();
            let rows = cache.rows.lock().unwrap();
            assert!(rows.by_id.contains_key(id), "{id} is kept");
            assert!(rows.bytes <= 3 * one && rows.by_id.len() <= 3);
            assert_eq!(rows.by_id.len(), rows.ids.len());
            assert_eq!(
                rows.bytes,
                rows.by_id.values().map(|s| footprint(s)).sum::<usize>()
            );
        }
        // A changed row leaves, and its bytes with it.
        let kept = cache.rows.lock().unwrap().by_id.len();
        set_url(&c, "sub-9", "https://two.example/hook");
        let rows = cache.rows.lock().unwrap();
        assert_eq!(rows.by_id.len(), kept - 1);
        assert_eq!(
            rows.bytes,
            rows.by_id.values().map(|s| footprint(s)).sum::<usize>()
        );
    }
}
