//! `hookline schedule`: the retry schedule the configured policy implies, attempt by attempt,
//! printed before anything is deployed.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use super::{table, Output};
use crate::config::{Config, Overrides};

pub fn run(config: Option<&Path>, output: Output) -> anyhow::Result<()> {
    let config = Config::load(config, Overrides::default())?;
    let timeout = config.delivery.attempt_timeout;
    output.print(&document(&config.retry, timeout), |_| {
        render(&config.retry, timeout)
    });
    Ok(())
}

/// Milliseconds, as the JSON documents write durations.
pub fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The schedule of `p` for attempts of at most `timeout`, as `-o json` prints it: the policy,
/// each attempt, and the summary, durations in milliseconds since first seen.
pub fn document(p: &hookline_policy::RetryPolicy, timeout: Duration) -> Value {
    let s = p.schedule(timeout);
    let attempts: Vec<Value> = s
        .rows
        .iter()
        .map(|r| {
            json!({
                "attempt": r.attempt,
                "nominal_delay_ms": ms(r.nominal_delay),
                "earliest_ms": ms(r.earliest),
                "latest_ms": ms(r.latest),
                "fits_window": r.fit.as_str(),
            })
        })
        .collect();
    json!({
        "policy": {
            "base_delay_ms": ms(p.base_delay()),
            "max_delay_ms": ms(p.max_delay()),
            "max_attempts": p.max_attempts(),
            "delivery_window_ms": ms(p.delivery_window()),
            "jitter": jitter(p.jitter()),
            "attempt_timeout_ms": ms(timeout),
        },
        "attempts": attempts,
        "worst_case_attempts": s.worst_case_attempts,
        "last_attempt_latest_ms": ms(s.last_attempt_latest),
    })
}

/// The jitter's name, as the config writes it.
fn jitter(j: hookline_policy::Jitter) -> &'static str {
    match j {
        hookline_policy::Jitter::Equal => "equal",
        hookline_policy::Jitter::Full => "full",
        hookline_policy::Jitter::None => "none",
    }
}

fn human(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    // Whole milliseconds: jitter halves can leave sub-millisecond noise that helps no one.
    humantime::format_duration(Duration::new(d.as_secs(), d.subsec_millis() * 1_000_000))
        .to_string()
}

/// The schedule of `p` for attempts of at most `timeout`, as a table with its summary.
pub fn render(p: &hookline_policy::RetryPolicy, timeout: Duration) -> String {
    let s = p.schedule(timeout);
    let jitter = match p.jitter() {
        hookline_policy::Jitter::Equal => "equal [d/2, d]",
        hookline_policy::Jitter::Full => "full [0, d]",
        hookline_policy::Jitter::None => "none",
    };
    let mut out = format!(
        "retry policy: base_delay {}, max_delay {}, max_attempts {}, delivery_window {}, \
         jitter {jitter}, attempt_timeout {}\n\n",
        human(p.base_delay()),
        human(p.max_delay()),
        p.max_attempts(),
        human(p.delivery_window()),
        human(timeout),
    );
    let rows: Vec<Vec<String>> = s
        .rows
        .iter()
        .map(|r| {
            vec![
                r.attempt.to_string(),
                if r.attempt == 1 {
                    "-".into()
                } else {
                    human(r.nominal_delay)
                },
                human(r.earliest),
                human(r.latest),
                r.fit.as_str().into(),
            ]
        })
        .collect();
    out += &table::render(
        &[
            "ATTEMPT",
            "NOMINAL DELAY",
            "EARLIEST",
            "LATEST",
            "FITS WINDOW",
        ],
        &rows,
    );
    out += "\nEARLIEST: shortest jitter and instant failures. LATEST: longest jitter and every \
            earlier attempt running to its timeout.\nTimes are since the delivery was first seen \
            and leave out queue wait.\n\n";
    out += &format!(
        "worst case: {} attempts per delivery (retry amplification up to {}x)\n",
        s.worst_case_attempts, s.worst_case_attempts
    );
    out += &format!(
        "last attempt starts at most {} after first seen (delivery window {})\n",
        human(s.last_attempt_latest),
        human(p.delivery_window())
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `hookline schedule` prints the default `[retry]` (derived in `defaults.toml`).
    #[test]
    fn the_default_schedule() {
        let config = Config::from_toml("").unwrap();
        let text = render(&config.retry, config.delivery.attempt_timeout);
        assert!(
            text.contains("base_delay 30s, max_delay 1h, max_attempts 23, delivery_window 1day"),
            "{text}"
        );
        assert!(
            text.contains("2        30s            15s         40s         yes"),
            "{text}"
        );
        assert!(
            text.contains("23       1h             8h 1m 45s   16h 7m 10s  yes"),
            "{text}"
        );
        assert!(
            text.contains("worst case: 23 attempts per delivery"),
            "{text}"
        );
        assert!(
            text.contains("at most 16h 7m 10s after first seen (delivery window 1day)"),
            "{text}"
        );
    }

    /// `-o json` holds what the table shows, in milliseconds.
    #[test]
    fn the_default_schedule_as_json() {
        let config = Config::from_toml("").unwrap();
        let doc = document(&config.retry, config.delivery.attempt_timeout);
        assert_eq!(doc["policy"]["base_delay_ms"], 30_000);
        assert_eq!(doc["policy"]["jitter"], "equal");
        assert_eq!(doc["attempts"].as_array().unwrap().len(), 23);
        assert_eq!(doc["attempts"][1]["earliest_ms"], 15_000);
        assert_eq!(doc["attempts"][1]["fits_window"], "yes");
        assert_eq!(doc["worst_case_attempts"], 23);
    }
}
