//! Which events a subscriber's `event_types` select: an exact type, every type under a prefix
//! (`shipment.*`: `shipment.delivered` and `shipment.eta.changed`, not `shipment` nor
//! `shipments.x`), or every type (`*`, like an empty list).
//!
//! The fan-out finds its subscribers in one statement per backend without reading each
//! subscriber's patterns in Rust: it asks which subscribers list any of the few patterns that
//! can match the event's type ([`patterns_matching`]), an overlap of two small sets. A type
//! `a.b.c` is matched by exactly `a.b.c`, `a.*`, `a.b.*` and `*`.

/// The pattern that selects every type.
pub const ANY_TYPE: &str = "*";

/// How a prefix pattern ends.
const UNDER: &str = ".*";

/// Types under `hookline.` are hookline's own (its test event, its operational events): each is
/// sent only to the subscriber it names, so no pattern selects one (`*`, an empty list,
/// `hookline.*`): a resend to a subscriber taking every type leaves them out. Publishers may
/// not use the prefix.
pub const OWN_PREFIX: &str = "hookline.";

/// Whether `event_type` is one of hookline's own.
pub fn is_own_type(event_type: &str) -> bool {
    event_type.starts_with(OWN_PREFIX)
}

/// Why a subscriber's event type pattern is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("a `*` may only stand alone or end a pattern as `.*` (e.g. `shipment.*`)")]
    MisplacedWildcard,
    #[error("a `.*` pattern needs a prefix that does not end in `.` (e.g. `shipment.*`)")]
    EmptyPrefix,
}

/// Checks the wildcard rules of a pattern; its length and characters are the API's to check,
/// as for any event type.
pub fn check_pattern(pattern: &str) -> Result<(), PatternError> {
    if pattern == ANY_TYPE {
        return Ok(());
    }
    let prefix = pattern.strip_suffix(UNDER).unwrap_or(pattern);
    if prefix.contains('*') {
        return Err(PatternError::MisplacedWildcard);
    }
    if prefix.len() < pattern.len() && (prefix.is_empty() || prefix.ends_with('.')) {
        return Err(PatternError::EmptyPrefix);
    }
    Ok(())
}

/// Whether a subscriber listing `pattern` (a valid one) receives events of `event_type`.
pub fn matches(pattern: &str, event_type: &str) -> bool {
    if is_own_type(event_type) {
        return pattern == event_type;
    }
    if pattern == ANY_TYPE || pattern == event_type {
        return true;
    }
    pattern.strip_suffix(UNDER).is_some_and(|prefix| {
        event_type.len() > prefix.len() + 1
            && event_type.starts_with(prefix)
            && event_type.as_bytes()[prefix.len()] == b'.'
    })
}

/// Whether a subscriber with `patterns` (empty: every type) receives events of `event_type`.
pub fn selects(patterns: &[String], event_type: &str) -> bool {
    (patterns.is_empty() && !is_own_type(event_type))
        || patterns.iter().any(|p| matches(p, event_type))
}

/// Every valid pattern that matches `event_type`: the type itself, `*`, and `<prefix>.*` for
/// each prefix that ends before a `.` with something after it. At most one more than the
/// type has dots, so bounded by the type's length.
pub fn patterns_matching(event_type: &str) -> Vec<String> {
    if is_own_type(event_type) {
        return vec![event_type.to_owned()];
    }
    let mut patterns = vec![event_type.to_owned(), ANY_TYPE.to_owned()];
    for (at, _) in event_type.match_indices('.') {
        let prefix = &event_type[..at];
        if at + 1 < event_type.len() && !prefix.is_empty() && !prefix.ends_with('.') {
            patterns.push(format!("{prefix}{UNDER}"));
        }
    }
    patterns
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_prefix_pattern_matches_below_its_prefix_only() {
        assert!(matches("shipment.*", "shipment.delivered"));
        assert!(matches("shipment.*", "shipment.eta.changed"));
        assert!(!matches("shipment.*", "shipment"));
        assert!(!matches("shipment.*", "shipment."));
        assert!(!matches("shipment.*", "shipments.x"));
        assert!(matches("*", "anything.at.all"));
        assert!(matches("invoice.paid", "invoice.paid"));
        assert!(!matches("invoice.paid", "invoice.paid.late"));
        assert!(selects(&[], "x"));
        assert!(!selects(&["a.*".into()], "b.c"));
    }

    #[test]
    fn wildcards_stand_alone_or_end_a_pattern() {
        for good in ["*", "shipment.*", "a.b.*", "plain", "a.b"] {
            assert_eq!(check_pattern(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("shipment*", PatternError::MisplacedWildcard),
            ("*.delivered", PatternError::MisplacedWildcard),
            ("a.*.b", PatternError::MisplacedWildcard),
            ("a.**", PatternError::MisplacedWildcard),
            ("**", PatternError::MisplacedWildcard),
            (".*", PatternError::EmptyPrefix),
            ("a..*", PatternError::EmptyPrefix),
        ] {
            assert_eq!(check_pattern(bad), Err(why), "{bad}");
        }
    }

    #[test]
    fn the_patterns_of_a_type_are_few() {
        assert_eq!(
            patterns_matching("shipment.eta.changed"),
            ["shipment.eta.changed", "*", "shipment.*", "shipment.eta.*"]
        );
        assert_eq!(patterns_matching("shipment"), ["shipment", "*"]);
    }

    #[test]
    fn hookline_s_own_types_are_selected_by_name_only() {
        let own = "hookline.subscriber.failing";
        for pattern in ["*", "hookline.*", "hookline.subscriber.*"] {
            assert!(!matches(pattern, own), "{pattern}");
        }
        assert!(matches(own, own));
        assert!(!selects(&[], own));
        assert!(selects(&[own.into()], own));
        assert_eq!(patterns_matching(own), [own]);
        assert!(matches("*", "hooklines.x") && !is_own_type("hookline"));
    }

    fn pattern() -> impl Strategy<Value = String> {
        prop_oneof!["[ab.]{1,6}", "[ab.]{0,5}\\.\\*", Just(ANY_TYPE.to_owned()),]
    }

    proptest! {
        /// The fan-out's overlap selects exactly the subscribers `matches` would.
        #[test]
        fn the_overlap_agrees_with_matching(pattern in pattern(), event_type in "(hookline\\.)?[ab.]{1,8}") {
            prop_assume!(check_pattern(&pattern).is_ok());
            prop_assert_eq!(
                patterns_matching(&event_type).contains(&pattern),
                matches(&pattern, &event_type)
            );
        }
    }
}
