//! SQLite's own page cache, with one walk taken out of every commit.
//!
//! When a b-tree page splits, SQLite (`balance_nonroot`) puts the new pages in ascending order
//! by swapping their numbers through a spare one: the locking page, just past 1 GiB of the file
//! (page 262,145 with 4 KiB pages). Its default page cache (`pcache1`) remembers the largest page
//! number it has held since its last truncation; at the end of every transaction the pager asks
//! it to drop the pages past the end of the file, and after such a swap that largest number is far
//! past the end, so it walks its whole hash table (8,192 buckets and ~6,500 pages on the writer's
//! 32 MiB cache) to find none. Under load nearly every batch splits a page somewhere, and the
//! writer commits thousands of times a second, so the walk is a visible share of its thread
//! (`docs/perf-journal.md` has the profile and the whole-process measurement that keeps this).
//!
//! This module installs SQLite's default page cache wrapped in a thin layer that keeps its own
//! bound on the page numbers held, not counting the locking page while a page only passes
//! through it, and passes a truncation on only when a page at or past the limit may be held.
//! Everything else goes straight to SQLite's cache, which still holds and evicts every page. The
//! bound is kept by [`KeyBound`], a plain value with property tests; the rest is forwarding.
//! (SQLite's cache, whose truncations are now mostly skipped, keeps its own largest number high:
//! a truncation that is passed on, after a rollback that grew the file, walks the whole table
//! as every commit did before.)

use std::ffi::{c_int, c_uint};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use rusqlite::ffi;

/// SQLite's `PENDING_BYTE`: the locking page is the one holding this offset of the file.
const PENDING_BYTE: c_uint = 0x4000_0000;

/// What a cache may hold past a limit: an upper bound on its page numbers, and whether a page
/// sits on the locking page (kept apart, so that passing through it does not raise the bound).
#[derive(Debug)]
pub(crate) struct KeyBound {
    locking_page: c_uint,
    max_key: c_uint,
    on_locking_page: bool,
}

impl KeyBound {
    pub(crate) fn new(page_size: c_uint) -> Self {
        Self::around((PENDING_BYTE / page_size.max(1)).saturating_add(1))
    }

    fn around(locking_page: c_uint) -> Self {
        KeyBound {
            locking_page,
            max_key: 0,
            on_locking_page: false,
        }
    }

    /// A page came back from the cache (found or created) under `key`.
    pub(crate) fn fetched(&mut self, key: c_uint) {
        self.holds(key);
    }

    /// A page's number changed from `old` to `new`.
    pub(crate) fn rekeyed(&mut self, old: c_uint, new: c_uint) {
        if old == self.locking_page {
            self.on_locking_page = false;
        }
        self.holds(new);
    }

    fn holds(&mut self, key: c_uint) {
        if key == self.locking_page {
            self.on_locking_page = true;
        } else {
            self.max_key = self.max_key.max(key);
        }
    }

    /// Whether a truncation to `limit` (drop every page numbered `limit` or more) can drop
    /// anything; when it can, it is passed on and the bound follows it.
    pub(crate) fn truncate(&mut self, limit: c_uint) -> bool {
        let may_hold =
            self.max_key >= limit || (self.on_locking_page && self.locking_page >= limit);
        if may_hold {
            self.max_key = self.max_key.min(limit.saturating_sub(1));
            if self.locking_page >= limit {
                self.on_locking_page = false;
            }
        }
        may_hold
    }
}

/// One cache: SQLite's, and the bound kept beside it.
struct Wrapped {
    inner: *mut ffi::sqlite3_pcache,
    bound: KeyBound,
}

/// SQLite's default page cache methods (the ones the wrapper forwards to), read before the
/// wrapper replaced them.
struct Defaults {
    create: unsafe extern "C" fn(c_int, c_int, c_int) -> *mut ffi::sqlite3_pcache,
    cachesize: unsafe extern "C" fn(*mut ffi::sqlite3_pcache, c_int),
    pagecount: unsafe extern "C" fn(*mut ffi::sqlite3_pcache) -> c_int,
    fetch: unsafe extern "C" fn(
        *mut ffi::sqlite3_pcache,
        c_uint,
        c_int,
    ) -> *mut ffi::sqlite3_pcache_page,
    unpin: unsafe extern "C" fn(*mut ffi::sqlite3_pcache, *mut ffi::sqlite3_pcache_page, c_int),
    rekey: unsafe extern "C" fn(
        *mut ffi::sqlite3_pcache,
        *mut ffi::sqlite3_pcache_page,
        c_uint,
        c_uint,
    ),
    truncate: unsafe extern "C" fn(*mut ffi::sqlite3_pcache, c_uint),
    destroy: unsafe extern "C" fn(*mut ffi::sqlite3_pcache),
    shrink: unsafe extern "C" fn(*mut ffi::sqlite3_pcache),
}

impl Defaults {
    fn of(m: &ffi::sqlite3_pcache_methods2) -> Option<Self> {
        Some(Defaults {
            create: m.xCreate?,
            cachesize: m.xCachesize?,
            pagecount: m.xPagecount?,
            fetch: m.xFetch?,
            unpin: m.xUnpin?,
            rekey: m.xRekey?,
            truncate: m.xTruncate?,
            destroy: m.xDestroy?,
            shrink: m.xShrink?,
        })
    }
}

static DEFAULT: OnceLock<Defaults> = OnceLock::new();

/// What the wrappers saw in this process: the self-test reads its own share of it.
static PASSED_ON: AtomicU64 = AtomicU64::new(0);
static SKIPPED: AtomicU64 = AtomicU64::new(0);
static THROUGH_LOCKING_PAGE: AtomicU64 = AtomicU64::new(0);

/// What the page cache wrappers saw in this process so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageCacheCounts {
    /// End-of-transaction truncations passed on to SQLite's cache.
    pub passed_on: u64,
    /// Truncations skipped: nothing was held at or past their limit.
    pub skipped: u64,
    /// Pages renumbered through the locking page (page splits putting pages in order).
    pub through_locking_page: u64,
}

pub(crate) fn counts() -> PageCacheCounts {
    PageCacheCounts {
        passed_on: PASSED_ON.load(Ordering::Relaxed),
        skipped: SKIPPED.load(Ordering::Relaxed),
        through_locking_page: THROUGH_LOCKING_PAGE.load(Ordering::Relaxed),
    }
}

/// Why SQLite's own page cache is in use rather than the wrapper.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PageCacheNotInstalled {
    #[error("SQLite was initialised before hookline could wrap its page cache")]
    SqliteInitialised,
    #[error("SQLite refused hookline's page cache wrapper")]
    Refused,
    #[error(
        "hookline's page cache wrapper failed its self-test ({0}); SQLite's own cache is used"
    )]
    SelfTestFailed(String),
}

/// Installs the wrapper for the rest of the process, once it has passed [`self_test`] on this
/// SQLite; else SQLite's own cache stays, which costs only the walk. Later calls answer the
/// first one's outcome.
///
/// # Safety
/// No other thread may be using SQLite, or starting to, while this runs: it changes a
/// process-wide setting that SQLite reads when it initialises, and SQLite's configuration
/// calls are not thread-safe (a cache created by the default methods and then handed to the
/// wrapper's would be undefined behaviour). hookline's `main` calls it before it starts the
/// runtime's threads.
pub unsafe fn install() -> Result<(), PageCacheNotInstalled> {
    // SAFETY: as this function's.
    unsafe { install_checked(self_test) }
}

/// [`install`], keeping the wrapper only if `check` passes.
///
/// # Safety
/// As [`install`]'s.
pub(crate) unsafe fn install_checked(
    check: fn() -> Result<(), String>,
) -> Result<(), PageCacheNotInstalled> {
    static OUTCOME: OnceLock<Result<(), PageCacheNotInstalled>> = OnceLock::new();
    OUTCOME
        .get_or_init(|| {
            // SAFETY: the caller keeps every other thread away from SQLite; an initialised
            // SQLite refuses both calls (SQLITE_MISUSE) and changes nothing. The default
            // methods are copied out before ours are installed, and SQLite copies ours in.
            let default = unsafe {
                let mut default: ffi::sqlite3_pcache_methods2 = std::mem::zeroed();
                if ffi::sqlite3_config(ffi::SQLITE_CONFIG_GETPCACHE2, &mut default)
                    != ffi::SQLITE_OK
                {
                    return Err(PageCacheNotInstalled::SqliteInitialised);
                }
                default
            };
            let Some(methods) = Defaults::of(&default) else {
                return Err(PageCacheNotInstalled::Refused);
            };
            let _ = DEFAULT.set(methods);
            let wrapper = ffi::sqlite3_pcache_methods2 {
                iVersion: default.iVersion,
                pArg: default.pArg,
                xInit: default.xInit,
                xShutdown: default.xShutdown,
                xCreate: Some(create),
                xCachesize: Some(cachesize),
                xPagecount: Some(pagecount),
                xFetch: Some(fetch),
                xUnpin: Some(unpin),
                xRekey: Some(rekey),
                xTruncate: Some(truncate),
                xDestroy: Some(destroy),
                xShrink: Some(shrink),
            };
            // SAFETY: as above.
            if unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_PCACHE2, &wrapper) }
                != ffi::SQLITE_OK
            {
                return Err(PageCacheNotInstalled::Refused);
            }
            check().map_err(|failed| {
                // SAFETY: the check closed its connection and no other thread uses SQLite, so
                // it shuts down; configured again, it initialises anew with its own cache.
                let restored = unsafe {
                    ffi::sqlite3_shutdown() == ffi::SQLITE_OK
                        && ffi::sqlite3_config(ffi::SQLITE_CONFIG_PCACHE2, &default)
                            == ffi::SQLITE_OK
                };
                assert!(
                    restored,
                    "cannot put SQLite's own page cache back after the wrapper failed its \
                     self-test ({failed})"
                );
                PageCacheNotInstalled::SelfTestFailed(failed)
            })
        })
        .clone()
}

/// Rows of the self-test's table whose index keys land all over the b-tree.
fn scattered(k: i64) -> String {
    format!(
        "{:016x}",
        k.cast_unsigned().wrapping_mul(0x9e37_79b9_7f4a_7c15)
    )
}

/// Most rounds the self-test runs before giving up on seeing a page pass through the locking
/// page.
const SELF_TEST_ROUNDS: i64 = 64;

/// Runs what the wrapper changes on a private temporary database (deleted when closed): commits
/// after page splits that renumber pages through the locking page must skip the walk (else the
/// wrapper saves nothing on this SQLite), a rolled-back transaction that grew the file must
/// still have its pages dropped, and the file must then pass `integrity_check` and read back
/// what was written after the rollback. Small pages make splits come soon.
fn self_test() -> Result<(), String> {
    fn check(conn: &mut rusqlite::Connection) -> rusqlite::Result<Result<(), String>> {
        use rusqlite::params;
        conn.execute_batch(
            "PRAGMA page_size = 512;
             CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL);
             CREATE INDEX t_v ON t (v);",
        )?;
        // Rounds of inserts whose keys land all over the index and deletes that free pages
        // for later splits to reuse out of order, until a commit after a renumbering through
        // the locking page has skipped the walk.
        let start = counts();
        let mut round = 0;
        let skipped_after_a_renumbering = loop {
            if round == SELF_TEST_ROUNDS {
                break false;
            }
            let renumbered = counts().through_locking_page > start.through_locking_page;
            let skipped_before = counts().skipped;
            let tx = conn.transaction()?;
            for k in round * 50..round * 50 + 50 {
                tx.execute(
                    "INSERT INTO t (k, v) VALUES (?1, ?2)",
                    params![k, scattered(k)],
                )?;
            }
            tx.execute(
                "DELETE FROM t WHERE k % 3 = ?1 AND k >= ?2",
                params![round % 3, round * 25],
            )?;
            tx.commit()?;
            if renumbered && counts().skipped > skipped_before {
                break true;
            }
            round += 1;
        };
        if !skipped_after_a_renumbering {
            return Ok(Err(format!(
                "no commit skipped the walk after a page passed through the locking page, in \
                 {SELF_TEST_ROUNDS} rounds"
            )));
        }
        let count = |c: &rusqlite::Connection| {
            c.query_row("SELECT count(*), sum(length(v)) FROM t", [], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, Option<i64>>(1)?))
            })
        };
        let before = count(conn)?;
        let passed_on = counts().passed_on;
        let tx = conn.transaction()?;
        for k in 1_000_000..1_000_500 {
            tx.execute(
                "INSERT INTO t (k, v) VALUES (?1, ?2)",
                params![k, scattered(k)],
            )?;
        }
        tx.rollback()?;
        if counts().passed_on == passed_on {
            return Ok(Err(
                "the rollback of a transaction that grew the file dropped nothing".into(),
            ));
        }
        if count(conn)? != before {
            return Ok(Err("a rolled-back transaction left rows behind".into()));
        }
        conn.execute("INSERT INTO t (k, v) VALUES (2000000, 'after')", [])?;
        let integrity: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        if integrity != "ok" {
            return Ok(Err(format!("integrity_check: {integrity}")));
        }
        let after: String =
            conn.query_row("SELECT v FROM t WHERE k = 2000000", [], |r| r.get(0))?;
        Ok((after == "after")
            .then_some(())
            .ok_or_else(|| format!("a row written after the rollback reads back as {after:?}")))
    }
    let mut conn = rusqlite::Connection::open("").map_err(|e| e.to_string())?;
    check(&mut conn).map_err(|e| e.to_string())?
}

fn default() -> &'static Defaults {
    DEFAULT
        .get()
        .expect("the wrapper is installed only after the defaults are read")
}

/// # Safety
/// `p` is a cache this module created and SQLite has not destroyed.
unsafe fn wrapped<'a>(p: *mut ffi::sqlite3_pcache) -> &'a mut Wrapped {
    // SAFETY: SQLite hands back the pointer `create` returned. A cache belongs to one pager,
    // of one connection (no shared cache here), and a rusqlite `Connection` is used by one
    // thread at a time (it is not `Sync`), so one cache's methods never run concurrently.
    // pcache1 lends pages between caches under its own mutex and never calls back into these
    // methods, so nothing else reaches a `Wrapped`.
    unsafe { &mut *(p as *mut Wrapped) }
}

unsafe extern "C" fn create(
    page_size: c_int,
    extra: c_int,
    purgeable: c_int,
) -> *mut ffi::sqlite3_pcache {
    // SAFETY: forwards to SQLite's own xCreate with SQLite's arguments.
    let inner = unsafe { (default().create)(page_size, extra, purgeable) };
    if inner.is_null() {
        return inner;
    }
    let wrapped = Box::new(Wrapped {
        inner,
        bound: KeyBound::new(page_size.max(1).unsigned_abs()),
    });
    Box::into_raw(wrapped) as *mut ffi::sqlite3_pcache
}

unsafe extern "C" fn cachesize(p: *mut ffi::sqlite3_pcache, n: c_int) {
    // SAFETY (here and below): `p` is ours (see `wrapped`); the call goes to SQLite's own
    // method with its own cache.
    unsafe { (default().cachesize)(wrapped(p).inner, n) }
}

unsafe extern "C" fn pagecount(p: *mut ffi::sqlite3_pcache) -> c_int {
    unsafe { (default().pagecount)(wrapped(p).inner) }
}

unsafe extern "C" fn fetch(
    p: *mut ffi::sqlite3_pcache,
    key: c_uint,
    create: c_int,
) -> *mut ffi::sqlite3_pcache_page {
    let w = unsafe { wrapped(p) };
    let page = unsafe { (default().fetch)(w.inner, key, create) };
    if !page.is_null() {
        w.bound.fetched(key);
    }
    page
}

unsafe extern "C" fn unpin(
    p: *mut ffi::sqlite3_pcache,
    page: *mut ffi::sqlite3_pcache_page,
    discard: c_int,
) {
    unsafe { (default().unpin)(wrapped(p).inner, page, discard) }
}

unsafe extern "C" fn rekey(
    p: *mut ffi::sqlite3_pcache,
    page: *mut ffi::sqlite3_pcache_page,
    old: c_uint,
    new: c_uint,
) {
    let w = unsafe { wrapped(p) };
    unsafe { (default().rekey)(w.inner, page, old, new) };
    if new == w.bound.locking_page {
        THROUGH_LOCKING_PAGE.fetch_add(1, Ordering::Relaxed);
    }
    w.bound.rekeyed(old, new);
}

unsafe extern "C" fn truncate(p: *mut ffi::sqlite3_pcache, limit: c_uint) {
    let w = unsafe { wrapped(p) };
    let passed_on = w.bound.truncate(limit);
    if passed_on { &PASSED_ON } else { &SKIPPED }.fetch_add(1, Ordering::Relaxed);
    if passed_on {
        unsafe { (default().truncate)(w.inner, limit) }
    }
}

unsafe extern "C" fn destroy(p: *mut ffi::sqlite3_pcache) {
    // SAFETY: SQLite destroys each cache once; the box is ours from `create`.
    let w = unsafe { Box::from_raw(p as *mut Wrapped) };
    unsafe { (default().destroy)(w.inner) }
}

unsafe extern "C" fn shrink(p: *mut ffi::sqlite3_pcache) {
    unsafe { (default().shrink)(wrapped(p).inner) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// What a cache may do to its keys: SQLite's cache may also drop any page on its own
    /// (eviction), which the bound never hears of.
    #[derive(Debug, Clone)]
    enum Op {
        Fetch(c_uint),
        /// Moves the held page at this index (modulo the count) to a key.
        Rekey(usize, c_uint),
        /// `balance_nonroot`'s swap of two held pages through the locking page.
        Swap(usize, usize),
        Evict(usize),
        Truncate(c_uint),
    }

    /// The locking page of the model: small, so that keys and limits fall on both sides of it
    /// (a file past 1 GiB has pages beyond the real one).
    const LOCKING: c_uint = 40;

    fn key() -> impl Strategy<Value = c_uint> {
        prop_oneof![1..80u32, Just(LOCKING)]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            key().prop_map(Op::Fetch),
            (any::<usize>(), key()).prop_map(|(i, k)| Op::Rekey(i, k)),
            (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Op::Swap(a, b)),
            any::<usize>().prop_map(Op::Evict),
            (1..90u32).prop_map(Op::Truncate),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// A truncation is skipped only when no held page would be dropped by it.
        #[test]
        fn a_truncation_is_skipped_only_when_it_would_drop_nothing(
            ops in proptest::collection::vec(op(), 1..80)
        ) {
            let mut bound = KeyBound::around(LOCKING);
            let locking = LOCKING;
            let mut held: BTreeSet<c_uint> = BTreeSet::new();
            let nth = |held: &BTreeSet<c_uint>, i: usize| {
                (!held.is_empty()).then(|| *held.iter().nth(i % held.len()).unwrap())
            };
            for op in ops {
                match op {
                    Op::Fetch(k) => {
                        held.insert(k);
                        bound.fetched(k);
                    }
                    Op::Rekey(i, new) => {
                        if let Some(old) = nth(&held, i) {
                            if !held.contains(&new) {
                                held.remove(&old);
                                held.insert(new);
                                bound.rekeyed(old, new);
                            }
                        }
                    }
                    Op::Swap(a, b) => {
                        if let (Some(ka), Some(kb)) = (nth(&held, a), nth(&held, b)) {
                            if ka != kb && !held.contains(&locking) {
                                bound.rekeyed(ka, locking);
                                bound.rekeyed(kb, ka);
                                bound.rekeyed(locking, kb);
                            }
                        }
                    }
                    Op::Evict(i) => {
                        if let Some(k) = nth(&held, i) {
                            held.remove(&k);
                        }
                    }
                    Op::Truncate(limit) => {
                        let drops = held.range(limit..).count() > 0;
                        let passed_on = bound.truncate(limit);
                        prop_assert!(passed_on || !drops, "skipped a truncation to {limit} that drops {held:?}");
                        if passed_on {
                            held.retain(|k| *k < limit);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_swap_through_the_locking_page_leaves_commits_with_nothing_to_walk() {
        let mut bound = KeyBound::new(4096);
        assert_eq!(bound.locking_page, 262_145);
        for k in 1..=500 {
            bound.fetched(k);
        }
        bound.rekeyed(400, 262_145);
        bound.rekeyed(300, 400);
        bound.rekeyed(262_145, 300);
        assert!(!bound.truncate(501));
        bound.fetched(501);
        assert!(bound.truncate(501), "a page past the end is dropped");
        assert!(!bound.truncate(501));
    }
}
