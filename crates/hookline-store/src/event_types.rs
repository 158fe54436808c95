//! Which event types a list of them takes: a subscriber's `event_types`, a resend's filter.
//! One function, so that every place that asks (a resend's selection today; a fan-out that
//! matches patterns tomorrow) answers alike.

/// Whether `event_type` is one `patterns` takes: an empty list takes every type, otherwise a
/// type is taken when it is one of the entries (compared exactly, as types are everywhere).
pub fn type_matches(patterns: &[String], event_type: &str) -> bool {
    patterns.is_empty() || patterns.iter().any(|p| p == event_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(types: &[&str]) -> Vec<String> {
        types.iter().map(|t| (*t).to_owned()).collect()
    }

    #[test]
    fn an_empty_list_takes_every_type() {
        for t in ["shipment.delivered", "invoice.paid", "x"] {
            assert!(type_matches(&[], t), "{t}");
        }
    }

    #[test]
    fn a_list_takes_exactly_its_entries() {
        let types = list(&["shipment.delivered", "invoice.paid"]);
        assert!(type_matches(&types, "shipment.delivered"));
        assert!(type_matches(&types, "invoice.paid"));
        for other in [
            "shipment.delivered.late",
            "shipment",
            "Shipment.delivered",
            "invoice.paid ",
            "",
        ] {
            assert!(!type_matches(&types, other), "{other:?}");
        }
    }
}
