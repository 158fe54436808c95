//! PostgreSQL migrations, applied in one transaction and serialized across every process that
//! starts at the same moment by a transaction-scoped advisory lock. The 0.1.0 baseline is
//! recorded in `hookline_migrations` (which 0.1.0 reads); later ones in `hookline_schema`, by the
//! rules in `crate::migrations`.
//!
//! No migration may hold a long lock on a busy table: columns are added nullable and without
//! a default (a catalog change), tables are new, and an index on an existing table is built
//! `CONCURRENTLY`, outside the transaction, from the migration's `.index.sql` file.
//! `lock_timeout` makes a migration that queues behind a long query fail and say so instead of
//! stalling every writer behind it.

use tokio_postgres::Client;

use super::{queries, to_int, Numbers};
use crate::migrations::{
    self, AppliedMigration, Migration, SchemaRecords, SchemaStatus, Version, LATER, LEGACY,
    LEGACY_MIGRATIONS,
};
use crate::{Result, StoreError};

async fn records(c: &impl tokio_postgres::GenericClient) -> Result<SchemaRecords> {
    let exists = async |table: &str| -> Result<bool> {
        Ok(c.query_one(queries::TABLE_EXISTS, &[&table]).await?.get(0))
    };
    let legacy = if exists("hookline_migrations").await? {
        c.query_one(queries::LEGACY_VERSION, &[]).await?.int(0)?
    } else {
        0
    };
    let mut applied = Vec::new();
    if exists("hookline_schema").await? {
        for r in c.query(queries::APPLIED_MIGRATIONS, &[]).await? {
            applied.push(AppliedMigration {
                number: r.int(0)?,
                min_binary: r.get::<_, String>(1).parse().map_err(StoreError::Invalid)?,
                description: r.get(2),
                applied_by: r.get(3),
            });
        }
    }
    Ok(SchemaRecords { legacy, applied })
}

pub(super) async fn migrate(client: &mut Client) -> Result<()> {
    // A migration that queued behind a long query (lock_timeout) or deadlocked with a worker
    // changed nothing: try again a few times before giving up.
    let mut tries = 0;
    loop {
        match apply(client, LATER).await {
            Err(e) if tries < 3 && matches!(e.sqlstate(), Some("55P03" | "40P01")) => {
                tries += 1;
                tracing::warn!(error = %e, tries, "migration could not take its locks; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            other => {
                other?;
                return backfill_origins(client).await;
            }
        }
    }
}

/// Fills in the origin of subscribers written without one: by a release before the column,
/// or by an older binary run on this schema since (a rollback, or a rolling upgrade). The
/// origin is the `url` crate's reading of the URL ([`Origin::of_url`]), which SQL cannot repeat.
async fn backfill_origins(client: &mut Client) -> Result<()> {
    let missing = client.query(queries::MISSING_ORIGINS, &[]).await?;
    let (ids, origins): (Vec<String>, Vec<String>) = missing
        .iter()
        .map(|r| {
            (
                r.get::<_, String>(0),
                crate::Origin::of_url(r.get(1)).as_str().to_owned(),
            )
        })
        .unzip();
    if !ids.is_empty() {
        client
            .execute(queries::SET_ORIGINS, &[&ids, &origins])
            .await?;
    }
    Ok(())
}

/// Applies what `known` has and the database lacks, after checking that this binary may run
/// on the schema at all.
pub(super) async fn apply(client: &mut Client, known: &[Migration]) -> Result<()> {
    let tx = client.transaction().await?;
    // Every process starting at once queues here; the first applies, the rest find it done.
    tx.execute(queries::MIGRATION_LOCK, &[]).await?;
    tx.batch_execute(queries::MIGRATION_LOCK_TIMEOUT).await?;
    tx.batch_execute(queries::LEGACY_TABLE).await?;
    tx.batch_execute(queries::RECORDS_TABLE).await?;
    let records = records(&tx).await?;
    let pending = migrations::plan(&records, known, Version::current())?;
    for (i, baseline) in LEGACY.iter().enumerate().skip(records.legacy as usize) {
        tracing::info!(migration = baseline.file, "applying a migration");
        tx.batch_execute(baseline.postgres).await?;
        tx.execute(queries::RECORD_LEGACY, &[&to_int(i + 1)])
            .await?;
    }
    let mut legacy = records.legacy.max(LEGACY_MIGRATIONS);
    for m in pending {
        tracing::info!(migration = m.file, "applying a migration");
        tx.batch_execute(m.postgres).await?;
        tx.execute(
            queries::RECORD_MIGRATION,
            &[
                &to_int(m.number),
                &m.min_binary.to_string(),
                &m.description,
                &Version::current().to_string(),
            ],
        )
        .await?;
        let next = migrations::legacy_after(legacy, m);
        if next > legacy {
            tx.execute(queries::CLOSE_LEGACY, &[&to_int(next)]).await?;
            legacy = next;
        }
    }
    tx.commit().await?;
    build_indexes(client, known).await
}

/// Builds the indexes applied migrations add to existing tables, `CONCURRENTLY` (writes go
/// on meanwhile), unless they are there and valid. One process builds at a time; the others
/// wait until it is done, without holding a snapshot the build would have to wait for (they
/// only try the lock). A build interrupted by a crash leaves an invalid index: it is dropped
/// and built again.
async fn build_indexes(client: &Client, known: &[Migration]) -> Result<()> {
    let validity = async |name: &str| -> Result<Option<bool>> {
        Ok(client
            .query_one(queries::INDEX_VALIDITY, &[&name])
            .await?
            .get(0))
    };
    for (name, sql) in known.iter().filter_map(|m| m.postgres_index) {
        let mut waited = false;
        loop {
            if validity(name).await? == Some(true) {
                break;
            }
            let locked: bool = client.query_one(queries::TRY_INDEX_LOCK, &[]).await?.get(0);
            if !locked {
                if !waited {
                    tracing::info!(
                        index = name,
                        "waiting for another process to build an index"
                    );
                    waited = true;
                }
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                continue;
            }
            tracing::info!(index = name, "building an index concurrently");
            let built = async {
                // Read again under the lock: another process may have just finished it.
                let state = validity(name).await?;
                if state == Some(true) {
                    return Ok(());
                }
                if state == Some(false) {
                    // An identifier, which no parameter can carry: the manifest's index name.
                    client
                        .batch_execute(&format!("DROP INDEX CONCURRENTLY IF EXISTS {name}"))
                        .await?;
                }
                client.batch_execute(sql).await?;
                Ok::<(), StoreError>(())
            }
            .await;
            client.execute(queries::INDEX_UNLOCK, &[]).await?;
            built?;
        }
    }
    Ok(())
}

/// The schema as this binary sees it, without changing anything.
pub(super) async fn status(client: &Client) -> Result<SchemaStatus> {
    Ok(migrations::status(records(client).await?, LATER))
}
