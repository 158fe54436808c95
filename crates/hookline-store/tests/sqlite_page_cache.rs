//! The page cache wrapper on a real SQLite file (its own test binary: the wrapper is installed
//! once per process, before SQLite is first used, with no other thread near SQLite).

use hookline_store::install_sqlite_page_cache;
use hookline_store::testing::sqlite_page_cache_counts;
use rusqlite::{params, Connection};

fn value(k: i64) -> String {
    format!(
        "{:016x}-{}",
        k.cast_unsigned().wrapping_mul(0x9e37_79b9_7f4a_7c15),
        "x".repeat(40)
    )
}

/// One commit of 500 rows whose index keys land all over the b-tree, and deletes, so that
/// later page splits reuse freed pages out of order: what makes SQLite renumber pages through
/// the locking page.
fn round(conn: &mut Connection, round: i64) {
    let tx = conn.transaction().unwrap();
    for k in round * 500..round * 500 + 500 {
        tx.execute("INSERT INTO t (k, v) VALUES (?1, ?2)", params![k, value(k)])
            .unwrap();
    }
    tx.execute(
        "DELETE FROM t WHERE k % 3 = ?1 AND k >= ?2",
        params![round % 3, round * 250],
    )
    .unwrap();
    tx.commit().unwrap();
}

/// The wrapper passes its self-test on the SQLite hookline bundles. Then, on a file in WAL
/// mode as the store keeps it: after pages have passed through the locking page, commits have
/// nothing past the end of the file to drop and skip the walk; a transaction that grew the
/// file and rolled back still drops the pages it added.
#[test]
fn commits_skip_the_walk_and_a_rolled_back_growth_is_still_dropped() {
    // SAFETY: the only test of this binary, before it opens SQLite.
    let installed = unsafe { install_sqlite_page_cache() };
    assert!(installed.is_ok(), "{installed:?}");
    let tested = sqlite_page_cache_counts();
    assert!(
        tested.through_locking_page > 0 && tested.skipped > 0 && tested.passed_on > 0,
        "{tested:?}"
    );
    // SAFETY: as above; a second call changes nothing.
    assert!(unsafe { install_sqlite_page_cache() }.is_ok());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache.db");
    let mut conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT); CREATE INDEX t_v ON t (v)")
        .unwrap();
    for r in 0..40 {
        round(&mut conn, r);
    }
    let before = sqlite_page_cache_counts();
    assert!(
        before.through_locking_page > 0,
        "no page split went through the locking page"
    );
    for r in 40..50 {
        round(&mut conn, r);
    }
    let after = sqlite_page_cache_counts();
    assert!(
        after.through_locking_page > before.through_locking_page,
        "the last rounds split no pages out of order"
    );
    assert!(
        after.skipped >= before.skipped + 10,
        "not every commit skipped the walk: {before:?} then {after:?}"
    );

    let count = |c: &Connection| -> i64 {
        c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap()
    };
    let page_count =
        |c: &Connection| -> i64 { c.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap() };
    let (rows, pages) = (count(&conn), page_count(&conn));
    let tx = conn.transaction().unwrap();
    for k in 1_000_000..1_020_000i64 {
        tx.execute("INSERT INTO t (k, v) VALUES (?1, ?2)", params![k, value(k)])
            .unwrap();
    }
    tx.rollback().unwrap();
    assert!(
        sqlite_page_cache_counts().passed_on > after.passed_on,
        "the rollback of a growth dropped nothing"
    );

    // The file is as it was, and pages reused after the rollback hold what was written since.
    assert_eq!((count(&conn), page_count(&conn)), (rows, pages));
    conn.execute("INSERT INTO t (k, v) VALUES (2000000, 'after')", [])
        .unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let fresh = Connection::open(&path).unwrap();
    assert_eq!(count(&fresh), rows + 1);
    let v: String = fresh
        .query_row("SELECT v FROM t WHERE k = 2000000", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, "after");
}
