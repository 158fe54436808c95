//! Query strings: the filters and paging of each list. Unknown parameters are refused by the
//! server; fields left `None` are not sent.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct EventQuery {
    /// Only events of this type.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        param(rename = "type", min_length = 1, max_length = 256)
    )]
    pub event_type: Option<String>,
    /// Only events whose type starts with this (case-sensitive), e.g. `shipment.`.
    #[cfg_attr(feature = "openapi", param(min_length = 1, max_length = 256))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub type_prefix: Option<String>,
    /// Only this tenant's.
    #[cfg_attr(feature = "openapi", param(min_length = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// Accepted at or after (RFC 3339, UTC, e.g. `2026-12-05T09:00:00Z`).
    #[cfg_attr(feature = "openapi", param(format = DateTime))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Accepted before (RFC 3339, UTC).
    #[cfg_attr(feature = "openapi", param(format = DateTime))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// 1 to 1000 (default 100).
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 1000))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// `next_cursor` of the page before.
    #[cfg_attr(feature = "openapi", param(min_length = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct SubscriberQuery {
    /// Only this tenant's subscribers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// Only subscribers whose id or URL contains this, in any case (1 to 256 characters, no
    /// NUL). A URL's query string is searched for admin tokens only (its values may be
    /// credentials): other callers' searches stop at its `?`.
    #[cfg_attr(feature = "openapi", param(min_length = 1, max_length = 256))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
    /// 1 to 1000 (default 100).
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 1000))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// `next_cursor` of the page before.
    #[cfg_attr(feature = "openapi", param(min_length = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// Unknown query parameters are refused, naming them (`?stat=dead` is a typo, not a filter).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct DeliveryQuery {
    /// Only this tenant's.
    #[cfg_attr(feature = "openapi", param(min_length = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    #[cfg_attr(feature = "openapi", param(min_length = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    #[cfg_attr(feature = "openapi", param(min_length = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscriber_id: Option<String>,
    #[cfg_attr(feature = "openapi", param(schema_with = crate::schema::delivery_state))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// `oldest` first (the default) or `newest` first; a cursor pages on in the same order.
    #[cfg_attr(feature = "openapi", param(schema_with = crate::schema::list_order))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order: Option<String>,
    /// 1 to 1000 (default 100).
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 1000))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// `next_cursor` of the page before.
    #[cfg_attr(feature = "openapi", param(min_length = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct DeadLetterQuery {
    /// Only this tenant's.
    #[cfg_attr(feature = "openapi", param(min_length = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    #[cfg_attr(feature = "openapi", param(schema_with = crate::schema::dead_reason))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[cfg_attr(feature = "openapi", param(min_length = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscriber_id: Option<String>,
    /// 1 to 1000 (default 100).
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 1000))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// `next_cursor` of the page before.
    #[cfg_attr(feature = "openapi", param(min_length = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct GroupQuery {
    /// Only this tenant's.
    #[cfg_attr(feature = "openapi", param(min_length = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct ReplayQuery {
    /// Only this tenant's.
    #[cfg_attr(feature = "openapi", param(min_length = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// `oldest` first (the default) or `newest` first; a cursor pages on in the same order.
    #[cfg_attr(feature = "openapi", param(schema_with = crate::schema::list_order))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order: Option<String>,
    /// 1 to 1000 (default 100).
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 1000))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// `next_cursor` of the page before.
    #[cfg_attr(feature = "openapi", param(min_length = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct ResendQuery {
    /// Only this tenant's.
    #[cfg_attr(feature = "openapi", param(min_length = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// Only those to this subscriber.
    #[cfg_attr(feature = "openapi", param(min_length = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscriber_id: Option<String>,
    /// `newest` first (the default) or `oldest` first; a cursor pages on in the same order.
    #[cfg_attr(feature = "openapi", param(schema_with = crate::schema::list_order))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order: Option<String>,
    /// 1 to 1000 (default 100).
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 1000))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// `next_cursor` of the page before.
    #[cfg_attr(feature = "openapi", param(min_length = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// `limit` and `cursor` of every list; any other parameter is refused, naming it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct PageQuery {
    /// 1 to 1000 (default 100).
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 1000))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// `next_cursor` of the page before.
    #[cfg_attr(feature = "openapi", param(min_length = 1))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}
