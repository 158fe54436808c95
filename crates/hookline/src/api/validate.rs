//! Shapes of the identifiers outsiders choose. Ids end up in the `webhook-id` header and in
//! URLs, so they are short and plain; subscriber ids carry no `:` so that
//! `<event id>:<subscriber id>` names exactly one delivery.

use super::ApiError;

pub const MAX_ID_LEN: usize = 128;
pub const MAX_EVENT_TYPE_LEN: usize = 256;

fn id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')
}

pub fn event_id(id: &str) -> Result<(), ApiError> {
    plain_id("event id", id, id_char)
}

pub fn subscriber_id(id: &str) -> Result<(), ApiError> {
    plain_id("subscriber id", id, |c| c != ':' && id_char(c))
}

fn plain_id(what: &str, id: &str, allowed: impl Fn(char) -> bool) -> Result<(), ApiError> {
    // Clients that normalise paths cannot address these.
    if id == "." || id == ".." {
        return Err(ApiError::invalid(format!("{what} must not be . or ..")));
    }
    if id.is_empty() || id.len() > MAX_ID_LEN || !id.chars().all(allowed) {
        let colon = if what == "subscriber id" { "" } else { ":" };
        return Err(ApiError::invalid(format!(
            "{what} must be 1 to {MAX_ID_LEN} characters of A-Z a-z 0-9 . _ {colon} -"
        )));
    }
    Ok(())
}

pub fn event_type(t: &str) -> Result<(), ApiError> {
    if t.is_empty() || t.len() > MAX_EVENT_TYPE_LEN || t.chars().any(char::is_control) {
        return Err(ApiError::invalid(format!(
            "event type must be 1 to {MAX_EVENT_TYPE_LEN} printable characters"
        )));
    }
    Ok(())
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
        let id = generate("evt", 1_786_784_400_000);
        assert!(event_id(&id).is_ok() && id.starts_with("evt_"));
        assert_ne!(id, generate("evt", 1_786_784_400_000));
    }
}
