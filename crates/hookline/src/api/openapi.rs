//! The OpenAPI 3.1 document, `GET /openapi.json`. Its paths and schemas are generated from the
//! handlers and the types they read and answer ([`super::routes`] adds each route with its
//! description); what every route shares (authentication, the errors any request can meet) is
//! added here once.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use serde_json::{json, Map, Value};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ComponentsBuilder, InfoBuilder, OpenApiBuilder, SecurityRequirement};
use utoipa::PartialSchema;

use super::error::ErrorEnvelope;

const DESCRIPTION: &str = "Webhook fan-out delivery: publish an event once; hookline delivers \
it to every subscribed endpoint at least once, signed with Standard Webhooks headers, with \
bounded retries, and dead letters replayed in bounded, paced, audited batches.\n\n\
Authentication: `Authorization: Bearer <token>`, tokens configured with a scope (`admin`, \
`read`, `publish`). With no tokens configured the API is open to loopback callers only. \
Every error answers `{\"error\": {\"code\", \"message\"}}`. Lists take `limit` (1 to 1000) \
and `cursor` and answer `{\"items\", \"next_cursor\"}`; an unknown query parameter or JSON \
field is refused (422, naming it).";

/// What the routes add their paths to.
pub fn base() -> utoipa::openapi::OpenApi {
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("hookline")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(DESCRIPTION))
                .build(),
        )
        .components(Some(
            ComponentsBuilder::new()
                .security_scheme(
                    "bearer",
                    SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
                )
                .schema("ErrorEnvelope", ErrorEnvelope::schema())
                .build(),
        ))
        .security(Some([SecurityRequirement::new::<_, _, &str>("bearer", [])]))
        .build()
}

/// The errors a request can meet whatever it asks: (status, code, when), each answered with
/// the error envelope.
const ANY_REQUEST: [(&str, &str, &str); 5] = [
    ("401", "unauthorized", "no token, or one that is not valid"),
    (
        "403",
        "forbidden",
        "the token's scope does not allow it, or (open mode) the request is not from loopback",
    ),
    (
        "422",
        "invalid_request",
        "a field, parameter or query parameter is refused (the message names it)",
    ),
    (
        "500",
        "storage_error",
        "the store failed (or `internal`: hookline did); nothing was changed",
    ),
    (
        "503",
        "unavailable",
        "hookline is shutting down (or `storage_unavailable`: the database cannot be reached \
         now, a failover: send the same request again after the Retry-After)",
    ),
];

/// And those a request with a body can meet.
const WITH_BODY: [(&str, &str, &str); 4] = [
    ("400", "malformed_json", "the body is not JSON"),
    ("408", "request_timeout", "the body did not arrive in time"),
    (
        "413",
        "payload_too_large",
        "the body is larger than the server accepts",
    ),
    (
        "415",
        "unsupported_media_type",
        "a body not sent as application/json",
    ),
];

/// And a request with a path parameter.
const WITH_PATH: [(&str, &str, &str); 1] =
    [("400", "bad_request", "a path parameter that is not UTF-8")];

fn error_response(code: &str, when: &str) -> Value {
    json!({
        "description": format!("`{code}`: {when}"),
        "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/ErrorEnvelope"},
            "example": {"error": {"code": code, "message": when}},
        }}
    })
}

/// Adds to every operation the errors any request of its kind can meet, where the operation
/// does not describe them itself: not 401 where no token is needed, not 422 where query
/// parameters are ignored, not 403 on `/healthz` (which answers anyone).
fn with_shared_errors(mut document: Value) -> Value {
    let Some(paths) = document["paths"].as_object_mut() else {
        return document;
    };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for operation in item.values_mut().filter_map(Value::as_object_mut) {
            let open = operation.get("security") == Some(&json!([{}]));
            let has_body = operation.contains_key("requestBody");
            let responses = operation
                .entry("responses")
                .or_insert_with(|| Value::Object(Map::new()));
            let Some(responses) = responses.as_object_mut() else {
                continue;
            };
            let shared = ANY_REQUEST
                .iter()
                .filter(|(status, _, _)| match *status {
                    "401" => !open,
                    "422" => !super::IGNORES_QUERIES.contains(&path.as_str()),
                    "403" => path != "/healthz",
                    _ => true,
                })
                .chain(has_body.then_some(&WITH_BODY).into_iter().flatten())
                .chain(
                    path.contains('{')
                        .then_some(&WITH_PATH)
                        .into_iter()
                        .flatten(),
                );
            for (status, code, when) in shared {
                responses
                    .entry(*status)
                    .or_insert_with(|| error_response(code, when));
            }
        }
    }
    document
}

/// The methods the document describes on the route `path` matches (`GET`, ...).
pub fn methods_of(path: &str) -> Vec<String> {
    static ROUTES: OnceLock<Vec<(Vec<String>, Vec<String>)>> = OnceLock::new();
    let routes = ROUTES.get_or_init(|| {
        let document: Value = serde_json::from_str(document()).expect("the document is JSON");
        let paths = document["paths"].as_object().cloned().unwrap_or_default();
        paths
            .into_iter()
            .map(|(template, item)| {
                let segments = template.split('/').map(str::to_owned).collect();
                let methods = item
                    .as_object()
                    .map(|ops| ops.keys().map(|m| m.to_uppercase()).collect())
                    .unwrap_or_default();
                (segments, methods)
            })
            .collect()
    });
    let segments: Vec<&str> = path.split('/').collect();
    routes
        .iter()
        .find(|(template, _)| {
            template.len() == segments.len()
                && template
                    .iter()
                    .zip(&segments)
                    .all(|(t, s)| t.starts_with('{') || t == s)
        })
        .map(|(_, methods)| methods.clone())
        .unwrap_or_default()
}

/// The document, built once.
pub fn document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let generated = serde_json::to_value(super::routes().into_openapi())
            .expect("the OpenAPI document serializes");
        serde_json::to_string_pretty(&with_shared_errors(generated))
            .expect("the OpenAPI document serializes")
    })
}

/// This document: every route, body, parameter, answer and error code.
#[utoipa::path(get, path = "/openapi.json", operation_id = "openapi", tag = "meta", security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json", body = Object)))]
pub async fn document_json() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], document())
}
