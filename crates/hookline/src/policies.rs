//! Named retry policies (the engine's [`Policy`]: a classification table, a retry schedule and
//! a circuit breaker): how one is read from the JSON an operator sends, every part or field left
//! out taken from the policy in force, and how one is shown. The config's `[retry]` and
//! `[breaker]` with the standard table are the policy `default`. A policy never changes once
//! stored; its definition is the JSON [`PolicyExt::to_json`] wrote.

pub use hookline_api::{
    BreakerPart, ClassificationPart, NewPolicy, RetryPart, SpelledBreaker, SpelledClassification,
    SpelledPolicy, SpelledRetry,
};
use std::time::Duration;

use hookline_engine::policy::{Policy, DEFAULT_POLICY};
use hookline_policy::{BreakerConfig, Classification, Jitter, RetryPolicy};
use serde_json::Value;

use crate::config::{parse_duration, Config};

/// Bounds on what a policy may ask for.
const MAX_STATUSES: usize = 500;
const MAX_ATTEMPTS: u32 = 1000;
const MAX_FAILURES: u32 = 1000;
const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

/// A definition refused: the field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Invalid {
    pub field: String,
    pub message: String,
}

fn invalid(field: &str, message: impl Into<String>) -> Invalid {
    Invalid {
        field: field.to_owned(),
        message: message.into(),
    }
}

fn duration(field: &str, given: Option<&str>, default: Duration) -> Result<Duration, Invalid> {
    let Some(text) = given else {
        return Ok(default);
    };
    let d = parse_duration(text).map_err(|e| invalid(field, e.to_string()))?;
    // Schedules are kept in milliseconds: less would be zero.
    if d < Duration::from_millis(1) || d > MAX_DURATION {
        return Err(invalid(field, "must be at least 1ms and at most 30 days"));
    }
    Ok(d)
}

fn statuses(field: &str, given: Option<Vec<u16>>, default: Vec<u16>) -> Result<Vec<u16>, Invalid> {
    match given {
        Some(list) if list.len() > MAX_STATUSES => Err(invalid(
            field,
            format!("may list at most {MAX_STATUSES} statuses"),
        )),
        Some(list) => Ok(list),
        None => Ok(default),
    }
}

fn human(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// What hookline adds to the engine's [`Policy`]: the config's `default`, a policy read from
/// an operator's definition, and a policy written out in full.
pub trait PolicyExt: Sized {
    /// `default`: the config's `[retry]` and `[breaker]`, and the standard table.
    fn default_of(config: &Config) -> Self;

    /// A new policy from a definition an operator sent: [`PolicyExt::read`], and refused when
    /// the retry schedule has an attempt that can never start inside the delivery window for
    /// attempts of `attempt_timeout`.
    fn define(d: NewPolicy, defaults: &Self, attempt_timeout: Duration) -> Result<Self, Invalid>;

    /// Reads a definition: every part or field it leaves out is `defaults'`; refused, naming
    /// the field, when a value is impossible.
    fn read(d: NewPolicy, defaults: &Self) -> Result<Self, Invalid>;

    /// The whole policy, every part and field spelled out.
    fn spelled(&self) -> SpelledPolicy;

    /// What the store keeps: the spelled-out policy, which reads back as the same policy.
    fn to_json(&self) -> Value;
}

impl PolicyExt for Policy {
    fn default_of(config: &Config) -> Policy {
        Policy {
            name: DEFAULT_POLICY.to_owned(),
            classification: Classification::default(),
            retry: config.retry,
            breaker: config.breaker,
        }
    }

    fn define(
        d: NewPolicy,
        defaults: &Policy,
        attempt_timeout: Duration,
    ) -> Result<Policy, Invalid> {
        let policy = Self::read(d, defaults)?;
        policy
            .retry
            .fits_window(attempt_timeout)
            .map_err(|e| invalid("retry", e.to_string()))?;
        Ok(policy)
    }

    fn read(d: NewPolicy, defaults: &Policy) -> Result<Policy, Invalid> {
        let c = d.classification.unwrap_or(ClassificationPart {
            retryable: None,
            revoke: None,
        });
        let base = &defaults.classification;
        let retryable = statuses(
            "classification.retryable",
            c.retryable,
            base.retryable().iter().copied().collect(),
        )?;
        let revoke = statuses(
            "classification.revoke",
            c.revoke,
            base.revoke().iter().copied().collect(),
        )?;
        let classification = Classification::new(retryable, revoke)
            .map_err(|e| invalid("classification", e.to_string()))?;

        let r = d.retry.unwrap_or(RetryPart {
            base_delay: None,
            max_delay: None,
            max_attempts: None,
            delivery_window: None,
            jitter: None,
        });
        let base = &defaults.retry;
        let max_attempts = r.max_attempts.unwrap_or(base.max_attempts());
        if max_attempts > MAX_ATTEMPTS {
            return Err(invalid(
                "retry.max_attempts",
                format!("may be at most {MAX_ATTEMPTS}"),
            ));
        }
        let jitter = match r.jitter.as_deref() {
            None => base.jitter(),
            Some(text) => Jitter::parse(text).ok_or_else(|| {
                invalid("retry.jitter", "must be \"equal\", \"full\" or \"none\"")
            })?,
        };
        let retry = RetryPolicy::new(
            duration(
                "retry.base_delay",
                r.base_delay.as_deref(),
                base.base_delay(),
            )?,
            duration("retry.max_delay", r.max_delay.as_deref(), base.max_delay())?,
            max_attempts,
            duration(
                "retry.delivery_window",
                r.delivery_window.as_deref(),
                base.delivery_window(),
            )?,
            jitter,
        )
        .map_err(|e| invalid(e.key(), e.to_string()))?;

        let b = d.breaker.unwrap_or(BreakerPart {
            failures: None,
            cool_down: None,
        });
        let failures = b.failures.unwrap_or(defaults.breaker.failures);
        if !(1..=MAX_FAILURES).contains(&failures) {
            return Err(invalid(
                "breaker.failures",
                format!("must be 1 to {MAX_FAILURES}"),
            ));
        }
        let breaker = BreakerConfig {
            failures,
            cool_down: duration(
                "breaker.cool_down",
                b.cool_down.as_deref(),
                defaults.breaker.cool_down,
            )?,
            // As for the default: a cool-down never grows past the retry schedule's longest wait.
            max_cool_down: retry.max_delay(),
        };
        Ok(Policy {
            name: d.name,
            classification,
            retry,
            breaker,
        })
    }

    fn spelled(&self) -> SpelledPolicy {
        let r = &self.retry;
        SpelledPolicy {
            name: self.name.clone(),
            classification: SpelledClassification {
                retryable: self.classification.retryable().iter().copied().collect(),
                revoke: self.classification.revoke().iter().copied().collect(),
            },
            retry: SpelledRetry {
                base_delay: human(r.base_delay()),
                max_delay: human(r.max_delay()),
                max_attempts: r.max_attempts(),
                delivery_window: human(r.delivery_window()),
                jitter: r.jitter().as_str().to_owned(),
            },
            breaker: SpelledBreaker {
                failures: self.breaker.failures,
                cool_down: human(self.breaker.cool_down),
            },
        }
    }

    fn to_json(&self) -> Value {
        serde_json::to_value(self.spelled()).expect("a policy serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn define(body: Value) -> Result<Policy, Invalid> {
        let config = Config::from_toml("").unwrap();
        let definition: NewPolicy = serde_json::from_value(body).unwrap();
        Policy::define(
            definition,
            &Policy::default_of(&config),
            config.delivery.attempt_timeout,
        )
    }

    #[test]
    fn left_out_parts_and_fields_come_from_the_default() {
        let p = define(
            json!({"name": "cf", "classification": {"retryable": [520, 522]},
                              "retry": {"max_attempts": 4}}),
        )
        .unwrap();
        let v = p.to_json();
        assert_eq!(v["classification"]["retryable"], json!([520, 522]));
        assert_eq!(v["classification"]["revoke"], json!([410]));
        assert_eq!(v["retry"]["max_attempts"], 4);
        assert_eq!(v["retry"]["base_delay"], "30s");
        assert_eq!(v["breaker"], json!({"failures": 5, "cool_down": "30s"}));
        // What it shows is a definition that reads back as the same policy.
        let again: NewPolicy = serde_json::from_value(v).unwrap();
        let config = Config::from_toml("").unwrap();
        let back = Policy::define(again, &Policy::default_of(&config), Duration::from_secs(10));
        assert_eq!(back.unwrap(), p);
    }

    #[test]
    fn impossible_values_are_refused_naming_the_field() {
        let cases = [
            (
                json!({"classification": {"retryable": [200]}}),
                "classification",
            ),
            (json!({"retry": {"base_delay": "2h"}}), "retry.base_delay"),
            (json!({"retry": {"base_delay": "1ns"}}), "retry.base_delay"),
            (json!({"retry": {"max_attempts": 0}}), "retry.max_attempts"),
            (
                json!({"retry": {"max_attempts": 100000}}),
                "retry.max_attempts",
            ),
            (
                json!({"retry": {"delivery_window": "forever"}}),
                "retry.delivery_window",
            ),
            (json!({"retry": {"jitter": "lots"}}), "retry.jitter"),
            (json!({"breaker": {"failures": 0}}), "breaker.failures"),
            (json!({"breaker": {"cool_down": "0s"}}), "breaker.cool_down"),
        ];
        for (mut body, field) in cases {
            body["name"] = json!("x");
            assert_eq!(define(body.clone()).unwrap_err().field, field, "{body}");
        }
        // Ten attempts cannot fit a one-minute window: the schedule arithmetic refuses it.
        let crowded = define(json!({"name": "x", "retry": {"max_attempts": 10,
                                                          "delivery_window": "1m"}}));
        let e = crowded.unwrap_err();
        assert_eq!(e.field, "retry");
        assert!(e.message.contains("can never start"), "{e}");
    }
}
