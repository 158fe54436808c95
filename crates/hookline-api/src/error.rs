//! The error envelope: every error the API answers, whatever the status.

use serde::{Deserialize, Serialize};

/// Every error's body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorEnvelope {
    pub error: ErrorBody,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// What kind of failure, for programs: `invalid_request`, `malformed_json`, `not_found`,
    /// `conflict`, `subscriber_revoked`, `unauthorized`, `forbidden`, `payload_too_large`,
    /// `unsupported_media_type`, `request_timeout`, `method_not_allowed`, `bad_request`,
    /// `over_capacity`, `over_quota`, `rate_limited`, `unavailable`, `storage_full`,
    /// `storage_unavailable`, `storage_error`, `internal`;
    /// a publish the event type catalog refuses: `unregistered_type`, `schema_violation`; a
    /// schema it refuses: `invalid_schema`.
    #[cfg_attr(feature = "openapi", schema(example = "invalid_request"))]
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
    /// With `schema_violation` only: where the payload broke its schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Box<SchemaViolation>>,
}

/// Where a payload broke its event type's schema (the first rule that failed).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SchemaViolation {
    #[cfg_attr(feature = "openapi", schema(example = "shipment.out_for_delivery"))]
    pub event_type: String,
    /// The payload version whose schema refused it.
    #[cfg_attr(feature = "openapi", schema(example = 2))]
    pub payload_version: i64,
    /// Where in that payload, as a JSON pointer (RFC 6901); empty: the payload itself.
    #[cfg_attr(feature = "openapi", schema(example = "/items/3/quantity"))]
    pub pointer: String,
    /// The JSON Schema keyword whose rule failed.
    #[cfg_attr(feature = "openapi", schema(example = "minimum"))]
    pub keyword: String,
    /// Where that rule is in the schema, as a JSON pointer.
    #[cfg_attr(
        feature = "openapi",
        schema(example = "/properties/items/items/properties/quantity/minimum")
    )]
    pub schema_path: String,
}
