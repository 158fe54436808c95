//! `/v1/event-types`: the event type catalog, the platform's (every tenant reads the same one;
//! only the platform's tokens change it). A type describes itself, may carry a JSON Schema per
//! payload version that its publishes are checked against (`crate::catalog`), and may be
//! deprecated. A type is never deleted and its name never reused; a schema version is added or
//! replaced, never removed (replace it with `{}` to accept anything): a payload that was
//! refused yesterday is not let through by an edit that loses a schema by mistake.

// The request bodies, beside the store's records of the same names.
use hookline_api as wire;
use hookline_api::EventTypeChange;
use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use hookline_store::{EventTypePatch, NewEventType, MAX_SCHEMA_VERSIONS};
use serde_json::Value;

use super::auth::Caller;
use super::error::{parse_json, ErrorEnvelope};
use super::subscribers::TEST_EVENT_TYPE;
use super::{events, page_limit, validate, views, Answer, ApiError, ApiState, PageQuery};
use crate::catalog::compiled_schema;

const TAG: &str = "event types";

/// The longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// A name the catalog may hold: an event type's rules, and none of what the catalog reserves.
fn name(name: &str) -> Result<(), ApiError> {
    validate::event_type(name).map_err(|e| ApiError::invalid(format!("name: {}", e.message)))?;
    if name.contains('*') {
        return Err(ApiError::invalid(
            "name: `*` is a subscription's wildcard (`shipment.*`), never part of a type",
        ));
    }
    if name == "." || name == ".." {
        return Err(ApiError::invalid("name must not be . or .."));
    }
    if name == TEST_EVENT_TYPE {
        return Err(ApiError::invalid(format!(
            "name: {TEST_EVENT_TYPE:?} is hookline's test event's type"
        )));
    }
    Ok(())
}

fn description(text: Option<String>) -> Result<Option<String>, ApiError> {
    if let Some(t) = &text {
        if t.chars().count() > MAX_DESCRIPTION_CHARS || t.chars().any(char::is_control) {
            return Err(ApiError::invalid(format!(
                "description must be at most {MAX_DESCRIPTION_CHARS} characters, none of them \
                 control characters"
            )));
        }
    }
    Ok(text)
}

/// Each schema by version, checked as a schema (`compiled_schema`) and kept as compact JSON.
fn schemas(given: BTreeMap<String, Value>) -> Result<BTreeMap<i64, String>, ApiError> {
    if given.len() > MAX_SCHEMA_VERSIONS {
        return Err(ApiError::invalid(format!(
            "schemas may hold at most {MAX_SCHEMA_VERSIONS} versions"
        )));
    }
    let mut checked = BTreeMap::new();
    for (key, schema) in given {
        let version = events::version_key(&key).ok_or_else(|| {
            ApiError::invalid(format!(
                "schemas: {key:?} is not a payload version (a non-negative integer)"
            ))
        })?;
        if schema.is_null() {
            return Err(ApiError::invalid(format!(
                "schemas.{key}: a version's schema is never removed; replace it with {{}} to \
                 accept any payload"
            )));
        }
        compiled_schema(version, &schema)?;
        let text = serde_json::to_string(&schema).map_err(|e| ApiError::invalid(e.to_string()))?;
        checked.insert(version, text);
    }
    Ok(checked)
}

/// Registers a type. Its schemas are checked as schemas first (422 `invalid_schema` naming
/// the version and the reason; 413 for one past 64 KiB).
#[utoipa::path(post, path = "/v1/event-types", operation_id = "create_event_type", tag = TAG,
    request_body(content = wire::NewEventType, example = json!({
        "name": "shipment.out_for_delivery", "description": "The parcel left the depot with a driver",
        "schemas": {"1": {"type": "object", "required": ["shipment"],
            "properties": {"shipment": {"type": "string"}}}}})),
    responses(
        (status = 201, description = "Registered", body = views::EventType),
        (status = 409, description = "A type of this name exists (names are never reused)", body = ErrorEnvelope),
        (status = 413, description = "`payload_too_large`: a schema past 64 KiB, or a body past the server's limit", body = ErrorEnvelope),
        (status = 422, description = "`invalid_schema`: a schema that is not draft 2020-12 JSON Schema, or refers outside itself; `over_quota`: the catalog holds its 1000 types; or an invalid field", body = ErrorEnvelope),
    ))]
pub async fn create(
    State(ctx): ApiState,
    caller: Option<Extension<Caller>>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<views::EventType> {
    let body: wire::NewEventType = parse_json(&body?)?;
    name(&body.name)?;
    let new = NewEventType {
        description: description(body.description)?,
        schemas: schemas(body.schemas.unwrap_or_default())?,
        deprecated: body.deprecated.unwrap_or(false),
        created_by: caller.map(|Extension(c)| c.name),
        name: body.name,
    };
    let created = ctx.store.create_event_type(new, ctx.clock.now_ms()).await?;
    ctx.catalog.remember(created.clone());
    Ok((StatusCode::CREATED, Json(views::event_type(&created))))
}

/// In the order they were registered, with their schemas. Readable with a tenant's token too.
#[utoipa::path(get, path = "/v1/event-types", operation_id = "list_event_types", tag = TAG, params(PageQuery),
    responses((status = 200, description = "A page of event types", body = views::Page<views::EventType>)))]
pub async fn list(
    State(ctx): ApiState,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Answer<views::Page<views::EventType>> {
    let Query(q) = query?;
    let page = ctx
        .store
        .list_event_types(page_limit(q.limit)?, q.cursor)
        .await?;
    Ok((StatusCode::OK, Json(views::page(&page, views::event_type))))
}

/// Readable with a tenant's token too.
#[utoipa::path(get, path = "/v1/event-types/{name}", operation_id = "get_event_type", tag = TAG, params(("name" = String, Path)),
    responses(
        (status = 200, description = "The type, with its schemas", body = views::EventType),
        (status = 404, description = "No such type", body = ErrorEnvelope),
    ))]
pub async fn get(State(ctx): ApiState, Path(name): Path<String>) -> Answer<views::EventType> {
    let found = ctx.store.get_event_type(&name).await?;
    Ok((StatusCode::OK, Json(views::event_type(&found))))
}

/// Fields left out keep their value; `schemas` adds or replaces versions (the next publish is
/// checked against them).
#[utoipa::path(patch, path = "/v1/event-types/{name}", operation_id = "update_event_type", tag = TAG, params(("name" = String, Path)),
    request_body(content = EventTypeChange, example = json!({"deprecated": true})),
    responses(
        (status = 200, description = "Changed", body = views::EventType),
        (status = 404, description = "No such type", body = ErrorEnvelope),
        (status = 413, description = "`payload_too_large`: a schema past 64 KiB, or a body past the server's limit", body = ErrorEnvelope),
        (status = 422, description = "`invalid_schema`, a removal of a version's schema, more than 16 versions, or an invalid field", body = ErrorEnvelope),
    ))]
pub async fn update(
    State(ctx): ApiState,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Answer<views::EventType> {
    let body: EventTypeChange = parse_json(&body?)?;
    let patch = EventTypePatch {
        description: body.description.map(description).transpose()?,
        schemas: schemas(body.schemas.unwrap_or_default())?,
        deprecated: body.deprecated,
    };
    let changed = ctx
        .store
        .update_event_type(&name, patch, ctx.clock.now_ms())
        .await?;
    ctx.catalog.remember(changed.clone());
    Ok((StatusCode::OK, Json(views::event_type(&changed))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_follow_the_event_types_rules_without_wildcards() {
        assert!(name("shipment.out_for_delivery").is_ok());
        assert!(name("Invoice Paid:v2").is_ok());
        for bad in ["", "shipment.*", "*", ".", "..", "hookline.test", "a\nb"] {
            assert_eq!(name(bad).unwrap_err().status.as_u16(), 422, "{bad:?}");
        }
        assert!(name(&"x".repeat(257)).is_err());
    }

    #[test]
    fn schemas_are_keyed_by_version_and_never_removed() {
        let given = |v: Value| serde_json::from_value::<BTreeMap<String, Value>>(v).unwrap();
        let kept = schemas(given(json!({"2": {"type": "object"}, "10": true}))).unwrap();
        assert_eq!(
            kept,
            BTreeMap::from([
                (2, r#"{"type":"object"}"#.to_owned()),
                (10, "true".to_owned())
            ])
        );
        for bad in [
            json!({"01": {}}),
            json!({"-1": {}}),
            json!({"v1": {}}),
            json!({"1": null}),
            json!({"1": {"type": 5}}),
        ] {
            let e = schemas(given(bad.clone())).unwrap_err();
            assert_eq!(e.status.as_u16(), 422, "{bad}: {}", e.message);
        }
        let e = schemas(given(json!({"1": null}))).unwrap_err();
        assert!(e.message.contains("never removed"), "{}", e.message);
        let e = schemas(given(json!({"3": {"type": "objekt"}}))).unwrap_err();
        assert_eq!(e.code, "invalid_schema");
        assert!(e.message.starts_with("schemas.3:"), "{}", e.message);
        let many: BTreeMap<String, Value> = (0..=MAX_SCHEMA_VERSIONS)
            .map(|v| (v.to_string(), json!({})))
            .collect();
        assert_eq!(schemas(many).unwrap_err().status.as_u16(), 422);
    }

    #[test]
    fn descriptions_are_bounded() {
        assert!(description(Some("a".repeat(MAX_DESCRIPTION_CHARS))).is_ok());
        assert!(description(Some("a".repeat(MAX_DESCRIPTION_CHARS + 1))).is_err());
        assert!(description(Some("tab\tinside".into())).is_err());
        assert_eq!(description(None).unwrap(), None);
    }
}
