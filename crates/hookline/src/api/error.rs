//! The one mapping from failures to HTTP: every error answers
//! `{"error": {"code": "...", "message": "..."}}` with a status that says whose fault it was.

use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
pub use hookline_api::{ErrorBody, ErrorEnvelope, SchemaViolation};
use hookline_store::StoreError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds, sent as `Retry-After` (with 503 `over_capacity`, 429 `rate_limited`).
    pub retry_after: Option<u64>,
    /// With `schema_violation` (boxed: every handler's error carries room for it).
    pub details: Option<Box<SchemaViolation>>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
            details: None,
        }
    }

    /// Admission refused a publish: nothing was stored; try again after `retry_after_s`.
    pub fn over_capacity(message: impl Into<String>, retry_after_s: u64) -> Self {
        Self {
            retry_after: Some(retry_after_s),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "over_capacity", message)
        }
    }

    /// A well-formed request that asks for something impossible.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", message)
    }

    pub fn malformed_json(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "malformed_json", message)
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// A request for a subscriber that is revoked (revocation is final): nothing can be sent
    /// to it.
    pub fn subscriber_revoked(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "subscriber_revoked", message)
    }

    /// No token, or one that is not valid.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// A valid token outside its scope, or (open mode) a request from a web page.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            message,
        )
    }

    /// hookline's own failure; the cause is logged, not told.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl From<hookline_engine::destination::DestinationError> for ApiError {
    fn from(e: hookline_engine::destination::DestinationError) -> Self {
        Self::invalid(e.to_string())
    }
}

impl From<hookline_engine::signer::SecretError> for ApiError {
    fn from(e: hookline_engine::signer::SecretError) -> Self {
        Self::invalid(e.to_string())
    }
}

impl From<crate::catalog::CatalogError> for ApiError {
    fn from(e: crate::catalog::CatalogError) -> Self {
        use crate::catalog::CatalogError;
        let unprocessable = |code| Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, e.to_string());
        match &e {
            CatalogError::Unregistered(_) => unprocessable("unregistered_type"),
            CatalogError::InvalidSchema { .. } => unprocessable("invalid_schema"),
            CatalogError::SchemaTooLarge { .. } => Self::too_large(e.to_string()),
            CatalogError::Violation(v) => Self {
                details: Some(Box::new(SchemaViolation {
                    event_type: v.event_type.clone(),
                    payload_version: v.payload_version,
                    pointer: v.pointer.clone(),
                    keyword: v.keyword.clone(),
                    schema_path: v.schema_path.clone(),
                })),
                ..unprocessable("schema_violation")
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorEnvelope {
            error: ErrorBody {
                code: self.code.to_owned(),
                message: self.message,
                details: self.details,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

/// Answers axum gives by itself (405 for a method a route does not serve, with `Allow`; 400 for
/// a path parameter that is not UTF-8) carry the error envelope like every other error.
pub async fn in_the_envelope(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    let status = response.status();
    let json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    if status == StatusCode::METHOD_NOT_ALLOWED {
        // axum adds `Allow` outside this layer; the document says the same.
        let allow = response.headers().get(axum::http::header::ALLOW).cloned();
        let allowed = allow
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .unwrap_or_else(|| super::openapi::methods_of(&path).join(", "));
        let mut answer = ApiError::new(
            status,
            "method_not_allowed",
            format!("{method} is not served on {path}; it serves {allowed}"),
        )
        .into_response();
        if let Some(allow) = allow {
            answer
                .headers_mut()
                .insert(axum::http::header::ALLOW, allow);
        }
        return answer;
    }
    let text = axum::body::to_bytes(response.into_body(), 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let code = if status.is_server_error() {
        "internal"
    } else {
        "bad_request"
    };
    ApiError::new(status, code, text).into_response()
}

/// The wait a full disk answers with: it clears when an operator makes room, and a publisher
/// retrying sooner only adds load.
pub const STORAGE_FULL_RETRY_AFTER_S: u64 = 30;

/// What a request the database could not be reached for is told to wait: a failover's gap is
/// seconds (docs/RUNBOOK.md, "PostgreSQL failover").
pub const UNREACHABLE_RETRY_AFTER_S: u64 = 1;

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => Self::not_found(format!("{what} not found")),
            StoreError::Conflict(m) => Self::conflict(m),
            StoreError::Invalid(m) => Self::invalid(m),
            StoreError::OverQuota(m) => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, "over_quota", m)
            }
            e @ StoreError::RateLimited { retry_after_ms, .. } => Self {
                // Whole seconds, rounded up: a client that waits them is admitted.
                retry_after: Some(
                    u64::try_from(retry_after_ms.max(1))
                        .unwrap_or(1)
                        .div_ceil(1000),
                ),
                ..Self::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    format!("{e}; nothing was stored: try again after the Retry-After"),
                )
            },
            StoreError::OverCapacity { deliveries, room } => Self::over_capacity(
                format!("the request would create {deliveries} deliveries; {room} fit now"),
                60,
            ),
            StoreError::Closed => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "hookline is shutting down",
            ),
            StoreError::StorageFull(m) => {
                hookline_engine::telemetry::store_error("api");
                tracing::error!(error = %m, "the database's storage is full");
                Self {
                    retry_after: Some(STORAGE_FULL_RETRY_AFTER_S),
                    ..Self::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "storage_full",
                        "the database's storage is full; nothing was changed: try again after \
                         the Retry-After",
                    )
                }
            }
            StoreError::Unreachable(m) => {
                hookline_engine::telemetry::store_error("api");
                tracing::error!(error = %m, "the database cannot be reached");
                Self {
                    retry_after: Some(UNREACHABLE_RETRY_AFTER_S),
                    ..Self::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "storage_unavailable",
                        "the database cannot be reached now (a failover, a restart); what was \
                         asked may or may not have been done: send the same request again after \
                         the Retry-After (a publish with the same id is stored once)",
                    )
                }
            }
            StoreError::Backend(m) => {
                hookline_engine::telemetry::store_error("api");
                tracing::error!(error = %m, "storage failure");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "storage_error",
                    "the store failed; nothing was changed",
                )
            }
        }
    }
}

impl From<BytesRejection> for ApiError {
    fn from(e: BytesRejection) -> Self {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Self::too_large("request body is larger than this server accepts")
        } else if let Some(late) = cause::<crate::server::BodyTimedOut>(&e) {
            Self::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                late.to_string(),
            )
        } else {
            Self::new(e.status(), "bad_request", e.body_text())
        }
    }
}

fn cause<'e, T: std::error::Error + 'static>(
    e: &'e (dyn std::error::Error + 'static),
) -> Option<&'e T> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        next = e.source();
    }
    None
}

impl From<QueryRejection> for ApiError {
    fn from(e: QueryRejection) -> Self {
        Self::invalid(e.body_text())
    }
}

/// Parses a JSON body, telling malformed JSON (400) apart from JSON of the wrong shape (422).
/// An object that names a key twice is refused (422) rather than silently keeping one of the
/// values: the sender and hookline would disagree about what was published.
/// A body that may be left out: empty, or JSON `null`, is `None`.
pub fn parse_optional_json<T: serde::de::DeserializeOwned>(
    body: &[u8],
) -> Result<Option<T>, ApiError> {
    if body.is_empty() {
        return Ok(None);
    }
    parse_json::<Option<T>>(body)
}

pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    use serde::de::DeserializeSeed;
    let mut reader = serde_json::Deserializer::from_slice(body);
    UniqueKeys
        .deserialize(&mut reader)
        .and_then(|()| reader.end())
        .and_then(|()| serde_json::from_slice(body))
        .map_err(json_error)
}

fn json_error(e: serde_json::Error) -> ApiError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Data => ApiError::invalid(e.to_string()),
        Category::Syntax | Category::Eof | Category::Io => {
            ApiError::malformed_json(format!("request body is not valid JSON: {e}"))
        }
    }
}

/// Walks a JSON document, keeping nothing but the keys of the object being read, and fails on
/// the first key an object repeats.
struct UniqueKeys;

impl<'de> serde::de::DeserializeSeed<'de> for UniqueKeys {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for UniqueKeys {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(UniqueKeys)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate key {key:?} in a JSON object"
                )));
            }
            map.next_value_seed(UniqueKeys)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::parse_json;

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        let status = |body: &str| {
            parse_json::<Value>(body.as_bytes()).map_err(|e| (e.status.as_u16(), e.message))
        };
        let (code, message) = status(r#"{"dup":1,"dup":2}"#).unwrap_err();
        assert_eq!(code, 422);
        assert!(message.contains("\"dup\""), "{message}");
        assert_eq!(status(r#"{"a":[{"k":1,"k":1}]}"#).unwrap_err().0, 422);
        // Escapes are read: "\u0061" is "a".
        assert_eq!(status(r#"{"a":1,"\u0061":2}"#).unwrap_err().0, 422);
        // The same key in sibling objects is fine.
        assert!(status(r#"{"a":{"k":1},"b":{"k":2},"k":[{"k":3}]}"#).is_ok());
        assert_eq!(status(r#"{"a":1} x"#).unwrap_err().0, 400);
        assert_eq!(status(r#"{"a":"#).unwrap_err().0, 400);
    }

    #[test]
    fn numbers_are_kept_as_written() {
        // Every digit survives; only an exponent's spelling is normalised (`E5` is `e+5`).
        let body = r#"{"big":12345678901234567890123,"e":1E400,"f":1.50,"n":-0.0,"s":2e-7}"#;
        let value: Value = parse_json(body.as_bytes()).unwrap();
        assert_eq!(
            serde_json::to_string(&value).unwrap(),
            r#"{"big":12345678901234567890123,"e":1e+400,"f":1.50,"n":-0.0,"s":2e-7}"#
        );
    }
}
