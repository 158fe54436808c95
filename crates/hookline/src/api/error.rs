//! The one mapping from failures to HTTP: every error answers
//! `{"error": {"code": "...", "message": "..."}}` with a status that says whose fault it was.

use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hookline_store::StoreError;
use serde_json::json;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
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
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        (self.status, Json(body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => Self::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("{what} not found"),
            ),
            StoreError::Conflict(m) => Self::conflict(m),
            StoreError::Invalid(m) => Self::invalid(m),
            StoreError::Closed => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "hookline is shutting down",
            ),
            StoreError::Backend(m) => {
                crate::telemetry::store_error("api");
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
        } else {
            Self::new(e.status(), "bad_request", e.body_text())
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(e: QueryRejection) -> Self {
        Self::invalid(e.body_text())
    }
}

/// Parses a JSON body, telling malformed JSON (400) apart from JSON of the wrong shape (422).
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    use serde_json::error::Category;
    serde_json::from_slice(body).map_err(|e| match e.classify() {
        Category::Data => ApiError::invalid(e.to_string()),
        Category::Syntax | Category::Eof | Category::Io => {
            ApiError::malformed_json(format!("request body is not valid JSON: {e}"))
        }
    })
}
