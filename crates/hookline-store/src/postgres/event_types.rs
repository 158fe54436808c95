//! The event type catalog on PostgreSQL. Every write sends `NOTIFY` ([`EVENT_TYPE_CHANGE`]) in
//! its transaction, so other processes' copies of the catalog are refreshed once it commits; a
//! change reads the type under its row lock, so concurrent changes apply one after the other.

use deadpool_postgres::GenericClient;
use hookline_policy::UnixMs;
use tokio_postgres::error::SqlState;
use tokio_postgres::Row;

use super::reads::not_found;
use super::{execute, queries, query, query_one, query_opt};
use crate::*;

/// The `NOTIFY` payload of a change to the catalog.
pub(super) const EVENT_TYPE_CHANGE: &str = "event_types";

/// A type's row as `EVENT_TYPE` and `EVENT_TYPES` read it, with its key.
fn event_type_row(r: &Row) -> Result<(i64, EventType)> {
    let schemas: String = r.get(3);
    Ok((
        r.get(0),
        EventType {
            name: r.get(1),
            description: r.get(2),
            schemas: schemas_read(&schemas)?,
            deprecated: r.get(4),
            revision: r.get(5),
            created_at: r.get(6),
            updated_at: r.get(7),
            created_by: r.get(8),
        },
    ))
}

async fn read(c: &impl GenericClient, sql: &str, name: &str) -> Result<EventType> {
    match query_opt(c, sql, &[&name]).await? {
        Some(r) => Ok(event_type_row(&r)?.1),
        None => Err(not_found("event type", name)),
    }
}

pub(super) async fn event_type(c: &impl GenericClient, name: &str) -> Result<EventType> {
    read(c, queries::EVENT_TYPE, name).await
}

pub(super) async fn event_types(
    c: &impl GenericClient,
    limit: u32,
    after: i64,
) -> Result<Page<EventType>> {
    let rows = query(c, queries::EVENT_TYPES, &[&after, &i64::from(limit + 1)])
        .await?
        .iter()
        .map(event_type_row)
        .collect::<Result<Vec<_>>>()?;
    Ok(page(rows, limit))
}

/// Registers `new` in the caller's transaction.
pub(super) async fn create(
    c: &impl GenericClient,
    new: &NewEventType,
    now: UnixMs,
    channel: &str,
) -> Result<EventType> {
    check_schema_versions(&new.name, &new.schemas)?;
    let inserted = execute(
        c,
        queries::INSERT_EVENT_TYPE,
        &[
            &new.name,
            &new.description,
            &schemas_column(&new.schemas)?,
            &new.deprecated,
            &now,
            &new.created_by,
            &i64::from(MAX_EVENT_TYPES),
        ],
    )
    .await;
    match inserted {
        Err(e) if e.sqlstate() == Some(SqlState::UNIQUE_VIOLATION.code()) => {
            Err(event_type_name_taken(&new.name))
        }
        Ok(0) => Err(catalog_full()),
        other => {
            other?;
            execute(c, queries::NOTIFY_WITH, &[&channel, &EVENT_TYPE_CHANGE]).await?;
            event_type(c, &new.name).await
        }
    }
}

/// Changes type `name` in the caller's transaction.
pub(super) async fn update(
    c: &impl GenericClient,
    name: &str,
    patch: EventTypePatch,
    now: UnixMs,
    channel: &str,
) -> Result<EventType> {
    let current = read(c, queries::EVENT_TYPE_FOR_UPDATE, name).await?;
    let read_at = current.revision;
    let next = patched_event_type(current, patch, now)?;
    execute(
        c,
        queries::UPDATE_EVENT_TYPE,
        &[
            &name,
            &next.description,
            &schemas_column(&next.schemas)?,
            &next.deprecated,
            &read_at,
            &now,
        ],
    )
    .await?;
    execute(c, queries::NOTIFY_WITH, &[&channel, &EVENT_TYPE_CHANGE]).await?;
    Ok(next)
}

pub(super) async fn revision(c: &impl GenericClient) -> Result<i64> {
    Ok(query_one(c, queries::EVENT_TYPES_REVISION, &[])
        .await?
        .get(0))
}
