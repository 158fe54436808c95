//! A page cache wrapper that fails its self-test leaves SQLite's own cache in place (its own
//! test binary: the cache is chosen once per process, before SQLite is used for anything else).

use hookline_store::testing::{install_sqlite_page_cache_checked_by, sqlite_page_cache_counts};
use hookline_store::PageCacheNotInstalled;
use rusqlite::Connection;

/// Uses SQLite through the wrapper, then fails.
fn failing_check() -> Result<(), String> {
    let conn = Connection::open("").map_err(|e| e.to_string())?;
    conn.execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY); INSERT INTO t VALUES (1);")
        .map_err(|e| e.to_string())?;
    Err("made to fail".into())
}

#[test]
fn a_failed_self_test_puts_sqlites_own_page_cache_back() {
    // SAFETY: the only test of this binary, before it opens SQLite.
    let installed = unsafe { install_sqlite_page_cache_checked_by(failing_check) };
    assert!(
        matches!(&installed, Err(PageCacheNotInstalled::SelfTestFailed(m)) if m == "made to fail"),
        "{installed:?}"
    );
    let seen = sqlite_page_cache_counts();
    assert!(
        seen.skipped + seen.passed_on > 0,
        "the check ran through the wrapper"
    );

    let dir = tempfile::tempdir().unwrap();
    let mut conn = Connection::open(dir.path().join("after.db")).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
        .unwrap();
    for round in 0..10 {
        let tx = conn.transaction().unwrap();
        for k in round * 100..round * 100 + 100 {
            tx.execute("INSERT INTO t VALUES (?1, 'row')", [k]).unwrap();
        }
        tx.commit().unwrap();
    }
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 1_000);
    assert_eq!(
        sqlite_page_cache_counts(),
        seen,
        "nothing went through the wrapper after it failed"
    );
}
