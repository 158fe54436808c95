//! Test and benchmark support (feature `testing`): a PostgreSQL to test against, and a schema
//! of one's own in it, so tests that share one database never see each other's rows.

mod replicated;
mod throwaway;

pub use replicated::ReplicatedPostgres;

use std::io::Write;
use std::sync::OnceLock;

use tokio_postgres::{Client, NoTls};

use crate::{open_with, OpenOptions, Result, Store};

/// Settings for tests and benchmarks, not the product's defaults (hookline's configuration
/// declares those, once).
impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            pool_size: 16,
            serving: false,
        }
    }
}

/// Opens the backend a database URL names with the test settings.
pub async fn open(url: &str) -> Result<std::sync::Arc<dyn Store>> {
    open_with(url, &OpenOptions::default()).await
}

/// The breaker every test decides by: hookline's default.
const BREAKER: hookline_policy::BreakerConfig = hookline_policy::BreakerConfig {
    failures: 5,
    cool_down: std::time::Duration::from_secs(30),
    max_cool_down: std::time::Duration::from_secs(300),
};

/// The record of `c`'s attempt, ended at `now` with `outcome` (200 for a success, 503
/// otherwise) and a short answer.
fn attempt(
    c: &crate::ClaimedDelivery,
    outcome: hookline_policy::Outcome,
    now: i64,
) -> crate::AttemptRecord {
    crate::AttemptRecord {
        ordinal: c.attempt,
        started_at: now,
        duration_ms: 3,
        outcome,
        status: Some(if outcome == hookline_policy::Outcome::Success {
            200
        } else {
            503
        }),
        error: None,
        response_body: Some(format!("answer to attempt {}", c.attempt)),
        policy: Some("default".into()),
    }
}

/// `c` completed at `now` into `transition`, by an attempt whose outcome led there.
pub fn completion(
    c: &crate::ClaimedDelivery,
    transition: crate::Transition,
    now: i64,
) -> crate::Completion {
    use hookline_policy::Outcome;
    let outcome = match transition {
        crate::Transition::Delivered => Outcome::Success,
        crate::Transition::Reschedule { .. } => Outcome::Retryable,
        crate::Transition::Dead(_) => Outcome::Permanent,
    };
    crate::Completion {
        key: c.key,
        lease: c.lease,
        record: attempt(c, outcome, now),
        transition,
        revoke_subscriber: false,
        breaker: BREAKER,
    }
}

pub use crate::sqlite::page_cache::PageCacheCounts;

/// What the page cache wrapper has seen in this process so far.
pub fn sqlite_page_cache_counts() -> PageCacheCounts {
    crate::sqlite::page_cache::counts()
}

/// `install_sqlite_page_cache` with `check` in place of its self-test: what a failed
/// self-test leaves.
///
/// # Safety
/// As `install_sqlite_page_cache`'s.
pub unsafe fn install_sqlite_page_cache_checked_by(
    check: fn() -> std::result::Result<(), String>,
) -> std::result::Result<(), crate::PageCacheNotInstalled> {
    // SAFETY: as this function's.
    unsafe { crate::sqlite::page_cache::install_checked(check) }
}

/// From now on, the writer of every SQLite store in this process recounts what it keeps in
/// memory (deliveries waiting per subscriber, the subscriber rows claims read)
/// from the tables after each batch, and stops at the first difference, recorded for
/// [`sqlite_figure_differences`]. The conformance suite turns it on; a benchmark built with
/// this feature leaves it off.
pub fn recount_sqlite_figures() {
    crate::sqlite::writer::RECOUNTING.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The differences the recounts found in the SQLite database files under `dir`, in words.
pub fn sqlite_figure_differences(dir: &std::path::Path) -> Vec<String> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
    crate::sqlite::writer::FIGURE_DIFFERENCES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter(|(path, _)| std::path::Path::new(path).starts_with(&dir))
        .map(|(path, difference)| format!("{path}: {difference}"))
        .collect()
}

/// Says in one line that the running test skips, and why, where a plain `cargo test` shows it.
/// The test harness captures what `println!` and `eprintln!` print and shows it only for a
/// test that fails, so a skipping test said nothing and was reported `ok`; a write to the
/// `io::stderr()` handle itself is not captured and appears among the harness's lines (and in
/// a CI log). The line names the test: the harness names each test's thread after it.
pub fn say_skipped(why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {why}");
}

/// The PostgreSQL tests use: `HOOKLINE_TEST_POSTGRES`; else a throwaway server this process
/// starts from the installed PostgreSQL (a Unix socket in a temporary directory, stopped and
/// removed when the process exits); else none, and the tests that need one skip, saying so in
/// one line. With `HOOKLINE_TEST_POSTGRES_REQUIRED=1` (as in CI) a skip is a failure.
pub fn postgres_url() -> Option<String> {
    // The outcome is kept, failure included: one attempt per test process.
    static URL: OnceLock<Result<String, String>> = OnceLock::new();
    let url = URL.get_or_init(|| match std::env::var("HOOKLINE_TEST_POSTGRES") {
        Ok(url) => Ok(url),
        Err(_) => throwaway::start(),
    });
    match url {
        Ok(url) => Some(url.clone()),
        Err(why) => {
            assert!(
                !postgres_required(),
                "PostgreSQL tests are required (HOOKLINE_TEST_POSTGRES_REQUIRED=1) but {why}"
            );
            static SAID: OnceLock<()> = OnceLock::new();
            SAID.get_or_init(|| {
                say_skipped(&format!(
                    "the PostgreSQL tests of this binary skip: {why}; set \
                     HOOKLINE_TEST_POSTGRES or install PostgreSQL"
                ));
            });
            None
        }
    }
}

/// `HOOKLINE_TEST_POSTGRES_REQUIRED=1` (as in CI): a PostgreSQL test that cannot run fails.
fn postgres_required() -> bool {
    std::env::var("HOOKLINE_TEST_POSTGRES_REQUIRED").as_deref() == Ok("1")
}

/// Skips the running test, saying `why` in one line, or fails it where PostgreSQL tests are
/// required.
fn skip_unless_required(why: &str) {
    assert!(
        !postgres_required(),
        "PostgreSQL tests are required (HOOKLINE_TEST_POSTGRES_REQUIRED=1) but {why}"
    );
    say_skipped(&format!("{why}; install PostgreSQL"));
}

async fn admin(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the test PostgreSQL at {url}: {e}"));
    tokio::spawn(connection);
    client
}

/// A fresh schema, created on `create` and removed by `drop_schema` (a test that fails leaves
/// it behind for inspection).
pub struct PgSchema {
    base: String,
    pub name: String,
}

impl PgSchema {
    /// `None` when there is no PostgreSQL to test against (see [`postgres_url`]): skip.
    pub async fn create() -> Option<Self> {
        let base = postgres_url()?;
        let name = format!("hl_test_{:016x}", rand::random::<u64>());
        admin(&base)
            .await
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await
            .expect("create a test schema");
        Some(PgSchema { base, name })
    }

    /// The database URL that puts hookline in this schema.
    pub fn url(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{sep}options=-c%20search_path%3D{}", self.base, self.name)
    }

    /// Runs each statement on its own connection-level turn, inside this schema (VACUUM refuses
    /// to share a transaction).
    pub async fn sql(&self, statements: &[&str]) {
        let client = admin(&self.base).await;
        client
            .batch_execute(&format!("SET search_path = {}", self.name))
            .await
            .expect("set search_path");
        for statement in statements {
            client.batch_execute(statement).await.expect(statement);
        }
    }

    pub async fn drop_schema(self) {
        admin(&self.base)
            .await
            .batch_execute(&format!("DROP SCHEMA {} CASCADE", self.name))
            .await
            .expect("drop a test schema");
    }
}

/// SQLite files opened from now on whose database may grow to at most so many pages (by the
/// path the store is opened with): a full disk on demand, since `PRAGMA max_page_count` holds
/// only for the connection that sets it, the store's writer.
static SQLITE_PAGE_CAPS: std::sync::Mutex<Vec<(String, u64)>> = std::sync::Mutex::new(Vec::new());

/// Caps the SQLite database at `path` to `pages` pages for every store opened on it from now
/// on: its writes fail with `StoreError::StorageFull` as on a full disk.
pub fn cap_sqlite_pages(path: &str, pages: u64) {
    SQLITE_PAGE_CAPS
        .lock()
        .unwrap()
        .push((path.to_owned(), pages));
}

/// The cap `cap_sqlite_pages` set for `path`, if any.
pub(crate) fn sqlite_page_cap(path: &str) -> Option<u64> {
    let caps = SQLITE_PAGE_CAPS.lock().unwrap();
    caps.iter().rev().find(|(p, _)| p == path).map(|(_, n)| *n)
}
