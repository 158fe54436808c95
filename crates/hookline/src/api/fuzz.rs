//! Property tests over arbitrary bytes for every parser an outsider can reach through the API:
//! each answers a value or an error, never a panic. Bounded (a few thousand cases each), so
//! they run with the rest of the suite in CI.

use proptest::prelude::*;
use serde::de::DeserializeOwned;

use super::error::parse_json;
use super::events;
use crate::config::Config;

fn config() -> ProptestConfig {
    ProptestConfig::with_cases(2_000)
}

/// Arbitrary bytes, and arbitrary JSON-ish text, which reaches deeper into the parsers.
fn bodies() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..512),
        r#"\{("(id|type|payload|payload_version|url|event_types|secret|status|reason|limit|per_second|subscriber_id|grace_period|policy|percent|subscriber_ids|abort_if)": ?(null|true|-?[0-9]{1,20}|"[^"]{0,20}"|\[\]|\{\}|\[\[\[\[)[, ]*){0,5}\}?"#
            .prop_map(String::into_bytes),
    ]
}

fn survives<T: DeserializeOwned>(body: &[u8]) {
    let _ = parse_json::<T>(body);
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn api_bodies_never_panic(body in bodies()) {
        let _ = events::new_event(&body, None, 1024, 0);
        survives::<hookline_api::NewSubscriber>(&body);
        survives::<hookline_api::SubscriberChange>(&body);
        survives::<hookline_api::SecretRotation>(&body);
        survives::<hookline_api::ReplayRequest>(&body);
        survives::<hookline_api::NewRollout>(&body);
        survives::<hookline_api::RolloutShare>(&body);
        survives::<hookline_api::RolloutAbort>(&body);
    }

    #[test]
    fn config_files_never_panic(text in "[a-z_\\[\\]=\". 0-9\n]{0,200}") {
        let _ = Config::from_toml(&text);
    }

    #[test]
    fn deeply_nested_json_is_refused_not_overflowed(depth in 100usize..5_000) {
        let body = format!(r#"{{"type":"t","payload":{}{}}}"#, "[".repeat(depth), "]".repeat(depth));
        let answer = events::new_event(body.as_bytes(), None, 1 << 20, 0);
        // serde_json stops at 128 levels: deep payloads are a clear 400, not a stack overflow.
        prop_assert_eq!(answer.is_ok(), depth < 127);
    }
}
