//! Shapes of the identifiers outsiders choose. Ids end up in the `webhook-id` header and in
//! URLs, so they are short and plain; subscriber ids carry no `:` so that
//! `<event id>:<subscriber id>` names exactly one delivery.

use std::collections::BTreeMap;

use hookline_store::{type_patterns, SubscriberHeaders};

use super::ApiError;

pub const MAX_ID_LEN: usize = 128;
pub const MAX_EVENT_TYPE_LEN: usize = 256;

fn id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')
}

/// Ids, types and subscriber ids under `hookline.` are hookline's own (its operational
/// endpoint and events, its test events): an outsider's may not start so.
fn not_own(what: &str, text: &str) -> Result<(), ApiError> {
    if text.starts_with(type_patterns::OWN_PREFIX) {
        return Err(ApiError::invalid(format!(
            "{what} must not start with {:?}: kept for hookline's own",
            type_patterns::OWN_PREFIX
        )));
    }
    Ok(())
}

pub fn event_id(id: &str) -> Result<(), ApiError> {
    plain_id("event id", id, id_char)?;
    not_own("event id", id)
}

/// A publish's `Idempotency-Key` header becomes its event id when the body has none, so it
/// follows the event id's rules (and its error names the header).
pub fn idempotency_key(key: &str) -> Result<(), ApiError> {
    let what = "the Idempotency-Key header (an event id)";
    plain_id(what, key, id_char)?;
    not_own(what, key)
}

/// A subscriber id may not look like a resend's suffix (`resend-<n>`): `<event id>:resend-1`
/// would otherwise name both a delivery to it and a resend of event `<event id>`'s delivery.
pub fn subscriber_id(id: &str) -> Result<(), ApiError> {
    plain_id("subscriber id", id, |c| c != ':' && id_char(c))?;
    not_own("subscriber id", id)?;
    if hookline_store::is_resend_suffix(id) {
        return Err(ApiError::invalid(
            "subscriber id must not be resend-<n>: resends' delivery ids end so",
        ));
    }
    Ok(())
}

/// A tenant's id follows the subscriber id's rules.
pub fn tenant_id(id: &str) -> Result<(), ApiError> {
    plain_id("tenant id", id, |c| c != ':' && id_char(c))
}

fn plain_id(what: &str, id: &str, allowed: impl Fn(char) -> bool) -> Result<(), ApiError> {
    // Clients that normalise paths cannot address these.
    if id == "." || id == ".." {
        return Err(ApiError::invalid(format!("{what} must not be . or ..")));
    }
    if id.is_empty() || id.len() > MAX_ID_LEN || !id.chars().all(&allowed) {
        let colon = if allowed(':') { ":" } else { "" };
        return Err(ApiError::invalid(format!(
            "{what} must be 1 to {MAX_ID_LEN} characters of A-Z a-z 0-9 . _ {colon} -"
        )));
    }
    Ok(())
}

pub fn policy_name(name: &str) -> Result<(), ApiError> {
    plain_id("policy name", name, |c| c != ':' && id_char(c))
}

/// A published event's type. `*` is kept for subscribers' patterns: a type holding one could
/// not be named by a subscription.
pub fn event_type(t: &str) -> Result<(), ApiError> {
    printable_type(t)?;
    not_own("event type", t)?;
    if t.contains('*') {
        return Err(ApiError::invalid(
            "event type must not contain `*`: it is kept for subscribers' patterns \
             (`shipment.*`, `*`)",
        ));
    }
    Ok(())
}

/// An entry of a subscriber's `event_types`: a type, `<prefix>.*` or `*`.
pub fn event_type_pattern(t: &str) -> Result<(), ApiError> {
    printable_type(t)?;
    type_patterns::check_pattern(t)
        .map_err(|e| ApiError::invalid(format!("event type pattern {t:?}: {e}")))
}

pub const MAX_ORDERING_KEY_LEN: usize = 128;

pub fn ordering_key(key: &str) -> Result<(), ApiError> {
    if key.is_empty() || key.len() > MAX_ORDERING_KEY_LEN || key.chars().any(char::is_control) {
        return Err(ApiError::invalid(format!(
            "ordering_key must be 1 to {MAX_ORDERING_KEY_LEN} printable characters"
        )));
    }
    Ok(())
}

/// A type searched for: any a store may hold, hookline's own (`hookline.`) included.
pub fn searched_type(t: &str) -> Result<(), ApiError> {
    printable_type(t)
}

fn printable_type(t: &str) -> Result<(), ApiError> {
    if t.is_empty() || t.len() > MAX_EVENT_TYPE_LEN || t.chars().any(char::is_control) {
        return Err(ApiError::invalid(format!(
            "event type must be 1 to {MAX_EVENT_TYPE_LEN} printable characters"
        )));
    }
    Ok(())
}

pub const MAX_HEADERS: usize = 20;
pub const MAX_HEADER_VALUE_LEN: usize = 4096;

/// Headers hookline writes itself (the signature, the framing, who is sending) or that
/// change how a request travels: a subscriber's headers may not set them.
fn reserved_header(name: &str) -> bool {
    name.starts_with("webhook-")
        || name.starts_with("proxy-")
        || matches!(
            name,
            "content-type"
                | "content-length"
                | "content-encoding"
                | "host"
                | "user-agent"
                | "transfer-encoding"
                | "connection"
                | "keep-alive"
                | "te"
                | "trailer"
                | "upgrade"
                // Trace context: each attempt's own, sent only when tracing is on.
                | "traceparent"
                | "tracestate"
        )
}

/// A subscriber's own headers: names are HTTP tokens (compared and stored in lower case),
/// values printable and bounded, none of hookline's own.
pub fn headers(given: BTreeMap<String, String>) -> Result<SubscriberHeaders, ApiError> {
    use axum::http::{HeaderName, HeaderValue};
    if given.len() > MAX_HEADERS {
        return Err(ApiError::invalid(format!(
            "headers may hold at most {MAX_HEADERS} headers"
        )));
    }
    let mut headers = BTreeMap::new();
    for (name, value) in given {
        let parsed = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| ApiError::invalid(format!("headers: {name:?} is not a header name")))?;
        let lower = parsed.as_str().to_owned();
        // Some receivers (CGI, PHP, WSGI) read `_` as `-`: `webhook_id` would be `webhook-id`.
        if reserved_header(&lower.replace('_', "-")) {
            return Err(ApiError::invalid(format!(
                "headers: {name} is set by hookline and cannot be overridden"
            )));
        }
        let printable = value.bytes().all(|b| (b' '..=b'~').contains(&b));
        if value.len() > MAX_HEADER_VALUE_LEN
            || !printable
            || HeaderValue::from_str(&value).is_err()
        {
            return Err(ApiError::invalid(format!(
                "headers: the value of {name} must be at most {MAX_HEADER_VALUE_LEN} \
                 printable ASCII characters"
            )));
        }
        if headers.insert(lower, value).is_some() {
            return Err(ApiError::invalid(format!(
                "headers: {name} is given twice (names are case-insensitive)"
            )));
        }
    }
    Ok(SubscriberHeaders(headers))
}

/// A fresh id: time-ordered prefix, random suffix.
pub fn generate(prefix: &str, now_ms: i64) -> String {
    format!("{prefix}_{:011x}{:016x}", now_ms, rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(event_id("SHP-20418:subscriber-731:out_for_delivery").is_ok());
        assert!(subscriber_id("subscriber-731").is_ok());
        assert!(subscriber_id("a:b").is_err());
        assert!(event_id("").is_err());
        assert!(event_id("has space").is_err());
        assert!(event_id(&"x".repeat(129)).is_err());
        assert!(event_id(&"x".repeat(128)).is_ok());
        for dots in [".", ".."] {
            assert!(event_id(dots).is_err() && subscriber_id(dots).is_err());
        }
        assert!(event_id("...").is_ok() && subscriber_id(".a").is_ok());
        assert!(event_type("shipment.out_for_delivery").is_ok());
        assert!(event_type("").is_err());
        assert!(event_type("a\nb").is_err());
        let ok = headers(BTreeMap::from([
            ("Authorization".to_owned(), "Basic dTpw".to_owned()),
            ("X-Tenant".to_owned(), "t 7".to_owned()),
        ]))
        .unwrap();
        assert_eq!(
            ok.0.keys().collect::<Vec<_>>(),
            ["authorization", "x-tenant"]
        );
        for (name, value) in [
            ("Webhook-Signature", "v1,x"),
            ("content-type", "text/plain"),
            ("Host", "evil.example"),
            ("content-length", "0"),
            ("transfer-encoding", "chunked"),
            ("proxy-authorization", "x"),
            ("bad name", "x"),
            ("", "x"),
            ("x-ok", "line\r\nbreak"),
            ("x-ok", "caf\u{e9}"),
            ("x-ok", "a\tb"),
            ("webhook_id", "x"),
            ("Content_Length", "0"),
            ("x-ok", &"v".repeat(MAX_HEADER_VALUE_LEN + 1)),
        ] {
            let one = BTreeMap::from([(name.to_owned(), value.to_owned())]);
            assert!(headers(one).is_err(), "{name}: {value:.20}");
        }
        let twice = BTreeMap::from([
            ("X-Key".to_owned(), "a".to_owned()),
            ("x-key".to_owned(), "b".to_owned()),
        ]);
        assert!(headers(twice).is_err());
        let many = (0..=MAX_HEADERS).map(|i| (format!("x-{i}"), "v".to_owned()));
        assert!(headers(many.collect()).is_err());
        let id = generate("evt", 1_786_784_400_000);
        assert!(event_id(&id).is_ok() && id.starts_with("evt_"));
        assert_ne!(id, generate("evt", 1_786_784_400_000));
    }
}
