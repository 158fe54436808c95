//! Every store keeps the same contract (one scenario, run on each): a duplicate gets the
//! recorded outcome without running anything; a claim dropped without a commit records
//! nothing, and on SQL stores undoes its side effect; copies of one delivery arriving at once
//! apply it once. PostgreSQL runs in a schema of its own in `HOOKLINE_TEST_POSTGRES`, and skips
//! saying why when that is unset (a failure under `HOOKLINE_TEST_POSTGRES_REQUIRED=1`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use hookline_receiver::{
    Claim, Claimed, DedupStore, MemoryClaim, MemoryStore, Outcome, PostgresClaim, PostgresStore,
    SqliteClaim, SqliteStore,
};

/// A store with a side effect written through its claims, and a count of them.
trait Harness: Send + Sync + 'static {
    type Store: DedupStore;
    /// Whether a dropped claim undoes its side effect (the SQL stores' transactions).
    const UNDOES_DROPPED: bool;
    fn store(&self) -> &Self::Store;
    fn apply<'a>(
        &'a self,
        claim: &'a <Self::Store as DedupStore>::Claim,
        id: &'a str,
    ) -> impl Future<Output = ()> + Send + 'a;
    fn applied(&self, id: &str) -> impl Future<Output = usize> + Send;
}

fn ok(body: &str) -> Outcome {
    Outcome::new(200, body).unwrap()
}

async fn new_claim<H: Harness>(h: &H, id: &str) -> <H::Store as DedupStore>::Claim {
    match h.store().claim(id).await.unwrap() {
        Claimed::New(claim) => claim,
        Claimed::Duplicate(o) => panic!("{id} is a duplicate ({o:?})"),
    }
}

async fn the_contract<H: Harness>(h: Arc<H>) {
    // Recorded, then answered again without running.
    let claim = new_claim(&*h, "evt-1:sub-1").await;
    h.apply(&claim, "evt-1:sub-1").await;
    claim
        .commit(Outcome::new(202, "applied").unwrap())
        .await
        .unwrap();
    match h.store().claim("evt-1:sub-1").await.unwrap() {
        Claimed::Duplicate(o) => assert_eq!((o.status(), o.body()), (202, "applied")),
        Claimed::New(_) => panic!("a committed id was claimed again"),
    }
    assert_eq!(h.applied("evt-1:sub-1").await, 1);

    // Dropped: nothing recorded (the next attempt runs), the side effect undone where it can be.
    let claim = new_claim(&*h, "evt-2:sub-1").await;
    h.apply(&claim, "evt-2:sub-1").await;
    drop(claim);
    let claim = new_claim(&*h, "evt-2:sub-1").await;
    if H::UNDOES_DROPPED {
        assert_eq!(
            h.applied("evt-2:sub-1").await,
            0,
            "rolled back with its claim"
        );
    }
    h.apply(&claim, "evt-2:sub-1").await;
    claim.commit(ok("second try")).await.unwrap();
    let expected = if H::UNDOES_DROPPED { 1 } else { 2 };
    assert_eq!(h.applied("evt-2:sub-1").await, expected);

    // Eight copies at once: one applies, seven get its outcome.
    let copies: Vec<_> = (0..8)
        .map(|n| {
            let h = h.clone();
            tokio::spawn(async move {
                match h.store().claim("evt-3:sub-1").await.unwrap() {
                    Claimed::New(claim) => {
                        h.apply(&claim, "evt-3:sub-1").await;
                        tokio::task::yield_now().await;
                        claim.commit(ok(&format!("copy {n}"))).await.unwrap();
                        None
                    }
                    Claimed::Duplicate(o) => Some(o),
                }
            })
        })
        .collect();
    let mut answers = Vec::new();
    for copy in copies {
        answers.push(copy.await.unwrap());
    }
    let duplicates: Vec<Outcome> = answers.iter().flatten().cloned().collect();
    assert_eq!(duplicates.len(), 7, "{answers:?}");
    assert!(
        duplicates.windows(2).all(|w| w[0] == w[1]),
        "one recorded outcome"
    );
    assert_eq!(h.applied("evt-3:sub-1").await, 1);

    // A duplicate arriving while the first is being handled waits for its outcome.
    let claim = new_claim(&*h, "evt-4:sub-1").await;
    let waiting = tokio::spawn({
        let h = h.clone();
        async move {
            match h.store().claim("evt-4:sub-1").await.unwrap() {
                Claimed::Duplicate(o) => o,
                Claimed::New(_) => panic!("ran while the first was open"),
            }
        }
    });
    // It is still waiting while the first is open (a pause lets it reach its wait; finishing
    // early would be the failure this shows).
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(
        !waiting.is_finished(),
        "the duplicate did not wait for the first"
    );
    h.apply(&claim, "evt-4:sub-1").await;
    claim.commit(ok("first")).await.unwrap();
    assert_eq!(waiting.await.unwrap(), ok("first"));
    assert_eq!(h.applied("evt-4:sub-1").await, 1);
}

struct Memory {
    store: MemoryStore,
    effects: Mutex<HashMap<String, usize>>,
}

impl Harness for Memory {
    type Store = MemoryStore;
    const UNDOES_DROPPED: bool = false;
    fn store(&self) -> &MemoryStore {
        &self.store
    }
    async fn apply(&self, _claim: &MemoryClaim, id: &str) {
        *self
            .effects
            .lock()
            .unwrap()
            .entry(id.to_owned())
            .or_default() += 1;
    }
    async fn applied(&self, id: &str) -> usize {
        self.effects.lock().unwrap().get(id).copied().unwrap_or(0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_keeps_the_contract() {
    the_contract(Arc::new(Memory {
        store: MemoryStore::new(100),
        effects: Mutex::default(),
    }))
    .await;
}

struct Sqlite {
    store: SqliteStore,
    path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Harness for Sqlite {
    type Store = SqliteStore;
    const UNDOES_DROPPED: bool = true;
    fn store(&self) -> &SqliteStore {
        &self.store
    }
    // Written before the future: a SQLite connection is not shared across threads (not Sync).
    fn apply(&self, claim: &SqliteClaim, id: &str) -> impl Future<Output = ()> + Send {
        claim
            .connection()
            .execute("INSERT INTO effects (id) VALUES (?1)", [id])
            .unwrap();
        std::future::ready(())
    }
    async fn applied(&self, id: &str) -> usize {
        let conn = rusqlite_conn(&self.path);
        conn.query_row("SELECT count(*) FROM effects WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .unwrap()
    }
}

fn rusqlite_conn(path: &std::path::Path) -> hookline_receiver::rusqlite::Connection {
    hookline_receiver::rusqlite::Connection::open(path).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_keeps_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("receiver.db");
    let store = SqliteStore::open(&path).unwrap();
    rusqlite_conn(&path)
        .execute_batch("CREATE TABLE effects (id TEXT NOT NULL)")
        .unwrap();
    the_contract(Arc::new(Sqlite {
        store,
        path,
        _dir: dir,
    }))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_store_remembers_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("receiver.db");
    let store = SqliteStore::open(&path).unwrap();
    let Claimed::New(claim) = store.claim("evt-1:sub-1").await.unwrap() else {
        panic!("new");
    };
    claim.commit(ok("kept")).await.unwrap();
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert!(
        matches!(store.claim("evt-1:sub-1").await.unwrap(), Claimed::Duplicate(o) if o == ok("kept"))
    );
}

struct Postgres {
    store: PostgresStore,
    admin: tokio_postgres_admin::Admin,
}

impl Harness for Postgres {
    type Store = PostgresStore;
    const UNDOES_DROPPED: bool = true;
    fn store(&self) -> &PostgresStore {
        &self.store
    }
    async fn apply(&self, claim: &PostgresClaim, id: &str) {
        claim
            .client()
            .execute("INSERT INTO effects (id) VALUES ($1)", &[&id])
            .await
            .unwrap();
    }
    async fn applied(&self, id: &str) -> usize {
        self.admin.count_effects(id).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_keeps_the_contract() {
    let Some(admin) = tokio_postgres_admin::Admin::create().await else {
        return;
    };
    let store = PostgresStore::connect(&admin.url(), 16).await.unwrap();
    admin.sql("CREATE TABLE effects (id text NOT NULL)").await;
    let h = Arc::new(Postgres { store, admin });
    the_contract(h.clone()).await;
    let Ok(h) = Arc::try_unwrap(h) else {
        panic!("the scenario's tasks ended")
    };
    h.admin.drop_schema().await;
}

/// A PostgreSQL schema of the test's own, in the database `HOOKLINE_TEST_POSTGRES` names.
pub mod tokio_postgres_admin {
    use hookline_receiver::tokio_postgres::{self, Client, NoTls};

    pub struct Admin {
        base: String,
        schema: String,
        client: Client,
    }

    impl Admin {
        /// `None` (saying why) without `HOOKLINE_TEST_POSTGRES`, unless
        /// `HOOKLINE_TEST_POSTGRES_REQUIRED=1`.
        pub async fn create() -> Option<Admin> {
            let Ok(base) = std::env::var("HOOKLINE_TEST_POSTGRES") else {
                let required =
                    std::env::var("HOOKLINE_TEST_POSTGRES_REQUIRED").as_deref() == Ok("1");
                assert!(
                    !required,
                    "HOOKLINE_TEST_POSTGRES_REQUIRED=1 but HOOKLINE_TEST_POSTGRES is unset"
                );
                let test = std::thread::current().name().unwrap_or("a test").to_owned();
                eprintln!("SKIPPED {test}: HOOKLINE_TEST_POSTGRES is not set (a postgres:// URL)");
                return None;
            };
            let (client, connection) = tokio_postgres::connect(&base, NoTls).await.unwrap();
            tokio::spawn(connection);
            let schema = format!("receiver_test_{}_{:x}", std::process::id(), nanos());
            client
                .batch_execute(&format!(
                    "CREATE SCHEMA {schema}; SET search_path = {schema}"
                ))
                .await
                .unwrap();
            Some(Admin {
                base,
                schema,
                client,
            })
        }

        pub fn url(&self) -> String {
            let sep = if self.base.contains('?') { '&' } else { '?' };
            format!(
                "{}{sep}options=-c%20search_path%3D{}",
                self.base, self.schema
            )
        }

        pub async fn sql(&self, statements: &str) {
            self.client.batch_execute(statements).await.unwrap();
        }

        pub async fn count_effects(&self, id: &str) -> usize {
            let row = self
                .client
                .query_one("SELECT count(*) FROM effects WHERE id = $1", &[&id])
                .await
                .unwrap();
            usize::try_from(row.get::<_, i64>(0)).unwrap()
        }

        pub async fn drop_schema(self) {
            self.sql(&format!("DROP SCHEMA {} CASCADE", self.schema))
                .await;
        }
    }

    fn nanos() -> u64 {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        u64::from(since.subsec_nanos()) ^ since.as_secs()
    }
}
