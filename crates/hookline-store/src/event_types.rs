//! The event type catalog's rules, the same on every backend: how many types and schema
//! versions it holds, what a change makes of a type, and how a type's schemas are kept in one
//! column (a JSON object of version to schema). Pure: the backends read and write the rows.

use std::collections::BTreeMap;

use hookline_policy::UnixMs;
use serde_json::value::RawValue;

use crate::*;

/// The most event types the catalog holds. Every process keeps the whole catalog (with each
/// schema compiled) in memory, so it is bounded; it is counted by the insert, so concurrent
/// registrations on PostgreSQL may pass it by their number.
pub const MAX_EVENT_TYPES: u32 = 1000;

/// The most schema versions one event type has: as many as one event carries payload versions.
pub const MAX_SCHEMA_VERSIONS: usize = 16;

/// The type a change makes of `current` at `now`: one revision more.
pub(crate) fn patched_event_type(
    current: EventType,
    patch: EventTypePatch,
    now: UnixMs,
) -> Result<EventType> {
    let mut schemas = current.schemas;
    schemas.extend(patch.schemas);
    check_schema_versions(&current.name, &schemas)?;
    Ok(EventType {
        description: patch.description.unwrap_or(current.description),
        schemas,
        deprecated: patch.deprecated.unwrap_or(current.deprecated),
        revision: current.revision.saturating_add(1),
        updated_at: now,
        ..current
    })
}

/// Refuses more schema versions than a type may have.
pub(crate) fn check_schema_versions(name: &str, schemas: &BTreeMap<i64, String>) -> Result<()> {
    if schemas.len() > MAX_SCHEMA_VERSIONS {
        return Err(StoreError::Invalid(format!(
            "event type {name:?} would have {} schema versions; it may have at most \
             {MAX_SCHEMA_VERSIONS}",
            schemas.len()
        )));
    }
    Ok(())
}

pub(crate) fn event_type_name_taken(name: &str) -> StoreError {
    StoreError::Conflict(format!(
        "event type {name:?} exists: names are never reused; PATCH it to change it"
    ))
}

pub(crate) fn catalog_full() -> StoreError {
    StoreError::OverQuota(format!(
        "the catalog holds its {MAX_EVENT_TYPES} event types; none can be added"
    ))
}

/// The `schemas` column: a JSON object of version to schema, each schema as it was given.
pub(crate) fn schemas_column(schemas: &BTreeMap<i64, String>) -> Result<String> {
    let mut raw = BTreeMap::new();
    for (version, schema) in schemas {
        let schema = RawValue::from_string(schema.clone())
            .map_err(|e| StoreError::Invalid(format!("schemas.{version}: not JSON text ({e})")))?;
        raw.insert(version.to_string(), schema);
    }
    serde_json::to_string(&raw).map_err(|e| StoreError::caused_by("encoding schemas", e))
}

/// The schemas `schemas_column` wrote, by version; anything else is a corrupt row.
pub(crate) fn schemas_read(column: &str) -> Result<BTreeMap<i64, String>> {
    let corrupt = || StoreError::backend(format!("unexpected event type schemas {column:?}"));
    let raw: BTreeMap<String, Box<RawValue>> =
        serde_json::from_str(column).map_err(|_| corrupt())?;
    raw.into_iter()
        .map(|(version, schema)| {
            let version = version.parse::<i64>().map_err(|_| corrupt())?;
            Ok((version, schema.get().to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn current() -> EventType {
        EventType {
            name: "shipment.delivered".into(),
            description: Some("the parcel is in".into()),
            schemas: BTreeMap::from([(1, r#"{"type":"object"}"#.to_owned())]),
            deprecated: false,
            revision: 1,
            created_at: 10,
            updated_at: 10,
            created_by: None,
        }
    }

    #[test]
    fn a_patch_adds_and_replaces_versions_and_keeps_what_it_leaves_out() {
        let patch = EventTypePatch {
            description: None,
            schemas: BTreeMap::from([(2, "true".to_owned()), (1, "{}".to_owned())]),
            deprecated: Some(true),
        };
        let next = patched_event_type(current(), patch, 20).unwrap();
        assert_eq!(next.description.as_deref(), Some("the parcel is in"));
        assert_eq!(
            next.schemas,
            BTreeMap::from([(1, "{}".to_owned()), (2, "true".to_owned())])
        );
        assert!(next.deprecated);
        assert_eq!(
            (next.revision, next.created_at, next.updated_at),
            (2, 10, 20)
        );
        let cleared = EventTypePatch {
            description: Some(None),
            ..Default::default()
        };
        assert_eq!(
            patched_event_type(next, cleared, 30).unwrap().description,
            None
        );
    }

    #[test]
    fn a_patch_past_the_versions_a_type_may_have_is_refused() {
        let many = (2..=i64::try_from(MAX_SCHEMA_VERSIONS).unwrap() + 1)
            .map(|v| (v, "{}".to_owned()))
            .collect();
        let patch = EventTypePatch {
            schemas: many,
            ..Default::default()
        };
        assert!(matches!(
            patched_event_type(current(), patch, 20),
            Err(StoreError::Invalid(_))
        ));
    }

    #[test]
    fn schemas_are_kept_as_given() {
        let schemas = BTreeMap::from([
            (
                1,
                r#"{"type": "object", "maximum": 12345678901234567890123}"#.to_owned(),
            ),
            (10, "false".to_owned()),
        ]);
        let column = schemas_column(&schemas).unwrap();
        assert_eq!(schemas_read(&column).unwrap(), schemas);
        assert!(schemas_column(&BTreeMap::from([(1, "{".to_owned())])).is_err());
        assert!(schemas_read("[]").is_err());
        assert!(schemas_read(r#"{"x": {}}"#).is_err());
    }
}
