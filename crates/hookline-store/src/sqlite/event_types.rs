//! The event type catalog on SQLite. Writes run on the writer, which orders them: a change
//! reads the type and writes it in one job.

use hookline_policy::UnixMs;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, Row};

use super::queries;
use super::reads::not_found;
use crate::*;

/// A type's row as `EVENT_TYPE` and `EVENT_TYPES` read it, with its key and its schemas'
/// column (read by [`finish`]).
type RawEventType = (i64, EventType, String);

fn event_type_row(r: &Row<'_>) -> rusqlite::Result<RawEventType> {
    Ok((
        r.get(0)?,
        EventType {
            name: r.get(1)?,
            description: r.get(2)?,
            schemas: Default::default(),
            deprecated: r.get(4)?,
            revision: r.get(5)?,
            created_at: r.get(6)?,
            updated_at: r.get(7)?,
            created_by: r.get(8)?,
        },
        r.get(3)?,
    ))
}

fn finish((seq, mut event_type, schemas): RawEventType) -> Result<(i64, EventType)> {
    event_type.schemas = schemas_read(&schemas)?;
    Ok((seq, event_type))
}

pub(super) fn event_type(c: &Connection, name: &str) -> Result<EventType> {
    let row = c
        .prepare_cached(queries::EVENT_TYPE)?
        .query_row([name], event_type_row)
        .optional()?
        .ok_or_else(|| not_found("event type", name))?;
    Ok(finish(row)?.1)
}

pub(super) fn event_types(c: &Connection, limit: u32, after: i64) -> Result<Page<EventType>> {
    let rows = c
        .prepare_cached(queries::EVENT_TYPES)?
        .query_map(params![after, limit + 1], event_type_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let rows = rows.into_iter().map(finish).collect::<Result<Vec<_>>>()?;
    Ok(page(rows, limit))
}

pub(super) fn create(c: &Connection, new: &NewEventType, now: UnixMs) -> Result<EventType> {
    check_schema_versions(&new.name, &new.schemas)?;
    let inserted = c
        .prepare_cached(queries::INSERT_EVENT_TYPE)?
        .execute(params![
            new.name,
            new.description,
            schemas_column(&new.schemas)?,
            new.deprecated,
            now,
            new.created_by,
            MAX_EVENT_TYPES,
        ]);
    match inserted {
        Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == ErrorCode::ConstraintViolation => {
            Err(event_type_name_taken(&new.name))
        }
        Ok(0) => Err(catalog_full()),
        other => {
            other?;
            event_type(c, &new.name)
        }
    }
}

pub(super) fn update(
    c: &Connection,
    name: &str,
    patch: EventTypePatch,
    now: UnixMs,
) -> Result<EventType> {
    let current = event_type(c, name)?;
    let read_at = current.revision;
    let next = patched_event_type(current, patch, now)?;
    c.prepare_cached(queries::UPDATE_EVENT_TYPE)?
        .execute(params![
            name,
            next.description,
            schemas_column(&next.schemas)?,
            next.deprecated,
            read_at,
            now,
        ])?;
    Ok(next)
}

pub(super) fn revision(c: &Connection) -> Result<i64> {
    Ok(c.prepare_cached(queries::EVENT_TYPES_REVISION)?
        .query_row([], |r| r.get(0))?)
}
