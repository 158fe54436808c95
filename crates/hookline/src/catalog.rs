//! The event type catalog as this process holds it: every registered type, each schema
//! compiled once, so that a publish is checked against its type's schemas without a store
//! round trip. The API checks an event here before the store sees it ([`Catalog::check`]): a
//! refused event stores nothing.
//!
//! The copy is loaded at start and changed by this process's own writes as they commit
//! ([`Catalog::remember`]). Other processes write only on a shared database (PostgreSQL), and
//! each of their writes sends `NOTIFY` in its transaction; [`keep_current`] reloads the copy
//! on that notification, and every [`REFRESH_EVERY_MS`] compares the store's revision (the sum
//! of the types' revisions, which every write moves) with the copy's, so a notification lost
//! while the listening connection was down delays a change by that much at most. On SQLite one
//! process serves the file and makes every write, so nothing is refreshed.
//!
//! What a schema may cost is bounded when it is registered ([`compiled_schema`]): at most
//! [`MAX_SCHEMA_BYTES`] of JSON, draft 2020-12 only, no reference outside the schema itself
//! (nothing is ever fetched: a `$ref` to another document is refused), and `pattern` and
//! `patternProperties` compiled by the `regex` crate, which matches in time linear in the text
//! (no backtracking, so no pattern can take exponential time; lookaround and backreferences
//! are refused as invalid patterns). `format` is an annotation, as draft 2020-12 says, not a
//! check. A payload is at most `max_payload_bytes`, so one check reads a bounded schema over a
//! bounded document, and stops at the first rule that fails.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use hookline_engine::clock::Clock;
use hookline_policy::UnixMs;
use hookline_store::{type_patterns, EventType, NewEvent, Store, StoreError, MAX_EVENT_TYPES};
use serde_json::Value;
use tokio::sync::watch;

use crate::config::UnregisteredTypes;

/// The largest schema of one payload version, as compact JSON.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// How often a process on a shared database compares its copy with the store's revision
/// (beside the notifications, which come at once).
pub const REFRESH_EVERY_MS: i64 = 5_000;

/// The only dialect a schema may name in `$schema` (or name none).
pub const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// Why the catalog refuses a schema or an event.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error(
        "event type {0:?} is not in the event type catalog, and this server publishes \
         registered types only ([events] require_registered_types); register it with \
         POST /v1/event-types. Nothing was stored"
    )]
    Unregistered(String),
    #[error("{0}")]
    Violation(Box<Violation>),
    #[error("schemas.{version}: {reason}")]
    InvalidSchema { version: i64, reason: String },
    #[error(
        "schemas.{version} is {bytes} bytes as compact JSON; a schema may have at most \
         {MAX_SCHEMA_BYTES}"
    )]
    SchemaTooLarge { version: i64, bytes: usize },
}

/// Where and how a payload broke its type's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub event_type: String,
    /// The payload version whose schema refused it.
    pub payload_version: i64,
    /// Where in that payload (a JSON pointer; empty: the payload itself).
    pub pointer: String,
    /// The schema keyword whose rule failed (`required`, `type`, `maxLength`, ...).
    pub keyword: String,
    /// Where that rule is in the schema (a JSON pointer).
    pub schema_path: String,
    /// What failed, for people (without the payload's values).
    pub reason: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = if self.pointer.is_empty() {
            "the payload".to_owned()
        } else {
            format!("{:?}", self.pointer)
        };
        write!(
            f,
            "payload version {} of {:?} does not match its schema: at {at}, {} (rule `{}` at \
             {:?} of the schema). Nothing was stored",
            self.payload_version, self.event_type, self.reason, self.keyword, self.schema_path
        )
    }
}

/// Refuses every reference to a document outside the schema: nothing is fetched, from the
/// network or from files.
struct NothingFetched;

impl jsonschema::Retrieve for NothingFetched {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!(
            "{uri} is outside the schema: hookline fetches nothing; put what it defines under \
             $defs and refer to it there"
        )
        .into())
    }
}

/// A schema as registered: what it checks, compiled with the bounds the module doc names.
pub fn compiled_schema(
    version: i64,
    schema: &Value,
) -> Result<jsonschema::Validator, CatalogError> {
    let invalid = |reason: String| CatalogError::InvalidSchema { version, reason };
    let bytes = serde_json::to_string(schema)
        .map_err(|e| invalid(e.to_string()))?
        .len();
    if bytes > MAX_SCHEMA_BYTES {
        return Err(CatalogError::SchemaTooLarge { version, bytes });
    }
    match schema {
        Value::Bool(_) => {}
        Value::Object(fields) => match fields.get("$schema") {
            None => {}
            Some(Value::String(dialect)) if dialect == DRAFT_2020_12 => {}
            Some(other) => {
                return Err(invalid(format!(
                    "$schema is {other}; hookline checks draft 2020-12 only: name \
                     {DRAFT_2020_12:?} or leave $schema out"
                )))
            }
        },
        _ => {
            return Err(invalid(
                "a JSON Schema is an object (or true or false)".to_owned(),
            ))
        }
    }
    if let Err(e) = jsonschema::draft202012::meta::validate(schema) {
        return Err(invalid(format!(
            "not a valid draft 2020-12 schema: at {:?} of it, {}",
            e.instance_path().as_str(),
            e.masked()
        )));
    }
    jsonschema::draft202012::options()
        .with_retriever(NothingFetched)
        .with_pattern_options(jsonschema::PatternOptions::regex())
        .build(schema)
        .map_err(|e| invalid(e.masked().to_string()))
}

/// One type of the catalog as this process holds it.
pub struct Known {
    pub record: EventType,
    /// Its schemas, compiled; a version without one is not checked.
    validators: BTreeMap<i64, jsonschema::Validator>,
}

impl Known {
    /// `record` with its schemas compiled. A stored schema that no longer compiles (one a
    /// later hookline reads more strictly) is logged and its version left unchecked, rather
    /// than refusing every publish of the type.
    fn of(record: EventType) -> Self {
        let mut validators = BTreeMap::new();
        for (version, text) in &record.schemas {
            let compiled = serde_json::from_str(text)
                .map_err(|e| CatalogError::InvalidSchema {
                    version: *version,
                    reason: e.to_string(),
                })
                .and_then(|schema| compiled_schema(*version, &schema));
            match compiled {
                Ok(validator) => {
                    validators.insert(*version, validator);
                }
                Err(e) => tracing::error!(
                    event_type = %record.name, version, error = %e,
                    "a stored schema does not compile; payloads of this version are not checked"
                ),
            }
        }
        Self { record, validators }
    }

    /// The first rule `payload` (version `version`, as JSON text) breaks, if any.
    fn violation(&self, version: i64, payload: &str) -> Option<Violation> {
        let validator = self.validators.get(&version)?;
        let payload: Value = match serde_json::from_str(payload) {
            Ok(p) => p,
            // The API wrote this text from a parsed value; it parses.
            Err(e) => {
                tracing::error!(error = %e, "a payload the API wrote does not parse");
                return None;
            }
        };
        let error = validator.validate(&payload).err()?;
        Some(Violation {
            event_type: self.record.name.clone(),
            payload_version: version,
            pointer: error.instance_path().as_str().to_owned(),
            keyword: error.kind().keyword().to_owned(),
            schema_path: error.schema_path().as_str().to_owned(),
            reason: error.masked().to_string(),
        })
    }
}

/// What this process knows of the catalog.
#[derive(Default)]
struct Copy {
    types: HashMap<String, Arc<Known>>,
    /// The sum of the revisions of `types`, as the store counts it
    /// (`EventTypes::event_types_revision`).
    revision: i64,
}

pub struct Catalog {
    store: Arc<dyn Store>,
    unregistered: UnregisteredTypes,
    copy: RwLock<Copy>,
}

impl Catalog {
    /// The catalog as the store holds it now.
    pub async fn load(
        store: Arc<dyn Store>,
        unregistered: UnregisteredTypes,
    ) -> Result<Arc<Self>, StoreError> {
        let catalog = Arc::new(Self {
            store,
            unregistered,
            copy: RwLock::default(),
        });
        catalog.reload().await?;
        Ok(catalog)
    }

    /// Reads every type again and replaces the copy.
    async fn reload(&self) -> Result<(), StoreError> {
        let mut copy = Copy::default();
        let mut cursor = None;
        loop {
            let page = self.store.list_event_types(MAX_EVENT_TYPES, cursor).await?;
            for record in page.items {
                copy.revision = copy.revision.saturating_add(record.revision);
                copy.types
                    .insert(record.name.clone(), Arc::new(Known::of(record)));
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        *self.copy.write().expect("catalog poisoned") = copy;
        Ok(())
    }

    /// Reloads the copy if the store's revision is not the copy's.
    pub async fn refresh(&self) -> Result<(), StoreError> {
        let revision = self.store.event_types_revision().await?;
        if revision != self.copy.read().expect("catalog poisoned").revision {
            self.reload().await?;
        }
        Ok(())
    }

    /// A type this process just wrote (and committed), unless the copy holds a later revision
    /// of it already (a concurrent write's, remembered first).
    pub fn remember(&self, record: EventType) {
        let known = Arc::new(Known::of(record));
        let mut copy = self.copy.write().expect("catalog poisoned");
        let held = copy
            .types
            .get(&known.record.name)
            .map_or(0, |k| k.record.revision);
        if known.record.revision > held {
            copy.revision = copy.revision.saturating_add(known.record.revision - held);
            copy.types.insert(known.record.name.clone(), known);
        }
    }

    pub fn get(&self, name: &str) -> Option<Arc<Known>> {
        self.copy
            .read()
            .expect("catalog poisoned")
            .types
            .get(name)
            .cloned()
    }

    /// Refuses `event` when its type is not registered and this server requires it, or when a
    /// payload version with a schema does not match it. Versions without a schema are not
    /// checked.
    pub fn check(&self, event: &NewEvent) -> Result<(), CatalogError> {
        let Some(known) = self.get(&event.event_type) else {
            return match self.unregistered {
                UnregisteredTypes::Accepted => Ok(()),
                UnregisteredTypes::Refused => {
                    Err(CatalogError::Unregistered(event.event_type.clone()))
                }
            };
        };
        let versions = event
            .earlier_payloads
            .iter()
            .map(|(v, p)| (*v, p.as_str()))
            .chain([(event.payload_version, event.payload.as_str())]);
        for (version, payload) in versions {
            if let Some(violation) = known.violation(version, payload) {
                return Err(CatalogError::Violation(Box::new(violation)));
            }
        }
        Ok(())
    }

    /// The deprecated types a subscriber's `patterns` name: each listed by its exact name or
    /// under a prefix (`shipment.*`), in name order. Every type (`*`, or an empty list) names
    /// none of them: it is warned about nothing.
    pub fn deprecated_among(&self, patterns: &[String]) -> Vec<String> {
        let copy = self.copy.read().expect("catalog poisoned");
        let mut named: Vec<String> = copy
            .types
            .iter()
            .filter(|(name, known)| {
                known.record.deprecated
                    && patterns
                        .iter()
                        .any(|p| p != type_patterns::ANY_TYPE && type_patterns::matches(p, name))
            })
            .map(|(name, _)| name.clone())
            .collect();
        named.sort_unstable();
        named
    }
}

/// Keeps `catalog` current with other processes' writes, until `stop` changes: at once on the
/// store's notification, and every [`REFRESH_EVERY_MS`] by its revision. Returns at once on a
/// store no other process writes.
pub async fn keep_current(
    catalog: Arc<Catalog>,
    clock: Arc<dyn Clock>,
    mut stop: watch::Receiver<bool>,
) {
    let Some(changes) = catalog.store.event_type_changes() else {
        return;
    };
    while !*stop.borrow() {
        let now: UnixMs = clock.now_ms();
        if let Err(e) = catalog.refresh().await {
            hookline_engine::telemetry::store_error("event_types");
            tracing::warn!(error = %e, "cannot read the event type catalog; keeping the last known");
        }
        tokio::select! {
            _ = clock.sleep_until(now.saturating_add(REFRESH_EVERY_MS)) => {}
            _ = changes.notified() => {}
            _ = stop.changed() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused(version: i64, schema: Value) -> CatalogError {
        compiled_schema(version, &schema).expect_err("refused")
    }

    #[test]
    fn schemas_are_checked_when_registered() {
        assert!(compiled_schema(1, &json!({"type": "object"})).is_ok());
        assert!(compiled_schema(1, &json!(true)).is_ok());
        assert!(compiled_schema(1, &json!({"$schema": DRAFT_2020_12})).is_ok());
        for bad in [
            json!({"type": "objekt"}),
            json!({"minLength": -1}),
            json!([1]),
            json!({"$schema": "http://json-schema.org/draft-07/schema#"}),
            // Not a pattern the linear-time engine takes (a backreference).
            json!({"pattern": "(a)\\1"}),
        ] {
            assert!(
                matches!(
                    refused(3, bad.clone()),
                    CatalogError::InvalidSchema { version: 3, .. }
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn nothing_outside_the_schema_is_fetched() {
        for outside in [
            json!({"$ref": "https://schemas.example/shipment.json"}),
            json!({"$ref": "file:///etc/passwd"}),
            json!({"properties": {"a": {"$ref": "other.json#/x"}}}),
        ] {
            let e = refused(1, outside.clone());
            assert!(
                matches!(e, CatalogError::InvalidSchema { .. }),
                "{outside}: {e}"
            );
        }
        // What it defines itself is found.
        let inside = json!({"$defs": {"id": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/id"}}});
        assert!(compiled_schema(1, &inside).is_ok());
    }

    /// A schema that refers to itself without reading further into the payload: refused, or
    /// checked in bounded time, never a stack overflow.
    #[test]
    fn a_schema_that_refers_to_itself_ends() {
        for looping in [
            json!({"$ref": "#"}),
            json!({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}),
            json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}),
            json!({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "string"}]}}, "$ref": "#/$defs/a"}),
        ] {
            if let Ok(validator) = compiled_schema(1, &looping) {
                // Reaching the next line is the test: the check ended.
                let _ = validator.is_valid(&json!({"a": [1, 2]}));
            }
        }
    }

    #[test]
    fn an_oversized_schema_is_refused() {
        let big = json!({"description": "x".repeat(MAX_SCHEMA_BYTES)});
        assert!(matches!(
            refused(2, big),
            CatalogError::SchemaTooLarge { version: 2, .. }
        ));
    }

    fn known(schemas: &[(i64, Value)]) -> Known {
        Known::of(EventType {
            name: "shipment.delivered".into(),
            description: None,
            schemas: schemas.iter().map(|(v, s)| (*v, s.to_string())).collect(),
            deprecated: false,
            revision: 1,
            created_at: 0,
            updated_at: 0,
            created_by: None,
        })
    }

    #[test]
    fn a_violation_names_the_version_the_pointer_and_the_rule() {
        let schema = json!({
            "type": "object",
            "required": ["shipment"],
            "properties": {"items": {"type": "array", "items": {"type": "integer", "maximum": 10}}}
        });
        let k = known(&[(1, schema)]);
        assert_eq!(k.violation(1, r#"{"shipment":"S1","items":[1,2]}"#), None);
        let v = k
            .violation(1, r#"{"shipment":"S1","items":[1,12]}"#)
            .unwrap();
        assert_eq!(
            (v.payload_version, v.pointer.as_str(), v.keyword.as_str()),
            (1, "/items/1", "maximum")
        );
        assert_eq!(v.schema_path, "/properties/items/items/maximum");
        let v = k.violation(1, r#"{"items":[]}"#).unwrap();
        assert_eq!((v.pointer.as_str(), v.keyword.as_str()), ("", "required"));
        // A version without a schema is not checked.
        assert_eq!(k.violation(2, "17"), None);
        // Numbers are compared as written, beyond what a float holds.
        let exact = known(&[(1, json!({"maximum": 1}))]);
        assert!(exact.violation(1, "1.0000000000000000000001").is_some());
    }
}
